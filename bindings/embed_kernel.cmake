# Turns a kernel Lua file (INPUT) into a C++ source (OUTPUT) holding it as
# the string host::lua::NAME.
file(READ "${INPUT}" SOURCE)
get_filename_component(FILE "${INPUT}" NAME)
file(WRITE "${OUTPUT}" "// Generated from bindings/${FILE}; do not edit.\nnamespace host::lua {\nextern const char* const ${NAME};\nconst char* const ${NAME} = R\"__kernel__(${SOURCE})__kernel__\";\n}\n")
