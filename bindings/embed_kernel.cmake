# Turns bindings/kernel.lua into a C++ source holding it as a string.
file(READ "${INPUT}" SOURCE)
file(WRITE "${OUTPUT}" "// Generated from bindings/kernel.lua; do not edit.\nnamespace host::lua {\nextern const char* const kKernelSource;\nconst char* const kKernelSource = R\"__kernel__(${SOURCE})__kernel__\";\n}\n")
