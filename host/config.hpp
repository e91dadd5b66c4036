// Tunables of the runtime, in one place, each with its default and why.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace host::config {

// Work finding (scheduler-notes.txt, "Work Finding").
// A worker that pops one process from the global queue moves up to this many
// more into its own deque, so the next pops are lock-free and local.
inline constexpr std::size_t kGlobalBatch = 16;
// Every this many scheduling ticks a worker looks at the global queue before
// its own deque, so a worker kept busy by its local ping-pong pair cannot
// starve submissions and re-queued yields (Go's schedtick % 61).
inline constexpr std::uint32_t kGlobalFairnessTick = 61;

// Idle protocol ("Adaptive Spinning"): rounds below kSpinRounds spin tightly,
// rounds below kYieldRounds yield the thread, then the worker parks.
inline constexpr int kSpinRounds = 4;
inline constexpr int kYieldRounds = 16;

// Every this many messages a step sends to processes already queued (a
// producer feeding a consumer it readied), it wakes a parked worker to take
// the consumer (host/worker.hpp, fed_queued_process). A ping-pong pair never
// gets there: each step sends one message, to a process that waits.
inline constexpr std::uint32_t kFeedsBeforeWake = 64;

// Initial capacity of a worker deque; it grows by doubling.
inline constexpr std::int64_t kDequeInitialCapacity = 256;

// Inline yields in a StepOutput before it spills to the heap.
inline constexpr std::size_t kInlineYields = 4;

// PID table: slots live in fixed chunks that are never moved or freed while
// the scheduler lives, so a sender can look a slot up without a lock.
inline constexpr std::uint32_t kPidChunkBits = 12;           // 4096 slots a chunk
inline constexpr std::uint32_t kPidMaxChunks = 1u << 14;     // 64M processes at most

// Timer wheel: 1 ms ticks, 6 levels of 64 slots (64^6 ms, about 2 years).
inline constexpr std::chrono::milliseconds kTimerTick{1};

// Handoff (runaway_monitor.hpp): a step that has run this long while work
// waits behind it lets another thread take that work: a parked worker is
// woken, or, when none is parked, a helper worker thread is started (up to
// one helper per worker, each retiring when it runs out of work).
inline constexpr std::chrono::milliseconds kHandoffAfter{50};

// Lazy JIT (bindings/lua_process_jit.cpp): a Lua process starts interpreted and
// switches LuaJIT's compiler on once it has run kJitWarmupInstructions
// bytecodes (or names `jit`). Switching it on probes the CPU with cpuid,
// which this kind of virtual machine traps: per state, it costs more than
// the rest of a spawn, so short-lived processes should not pay it. 100k
// bytecodes are a short run of interpreted Lua, so a
// process that computes pays little extra before it is compiled (BENCHMARKS.md's source figures).
//
// The count is a count hook's, and any count hook sends every bytecode
// through the interpreter's hook check (extra work for each, and a
// second cold dispatch table a step). So it is armed only on a process's
// first kJitProbeSteps steps, which count in full, and then on one step in
// kJitSampleSteps, which counts for the steps since the last: it fires
// every kJitHookInterval bytecodes, so a step shorter than that counts
// nothing. A process whose steps only pass messages on (a few dozen
// bytecodes each) stays interpreted: with the compiler on in each of them,
// the rings and Big ran slower here, not faster (BENCHMARKS.md, change 26);
// one whose steps compute 1000 bytecodes or more is compiled about as soon
// as a hook on every bytecode would have done it. What it misses: a late
// step that computes at length without being sampled runs interpreted to
// its end (the next sampled step compiles the process).
//
// Past the warm-up the probe compiles a process only where its steps are
// computation: the step the hook fires in has run kJitLongStepFirings x
// 1000 bytecodes or more, or two of its last four armed steps ran 1000
// or more. A message-passing process whose step now and then takes a batch
// of queued messages (Big's workers: 15-19 of 100 passed the warm-up
// alone) stays interpreted: compiled, each of many such processes has
// its own traces, cold when it runs again, and a C call (a send) every
// few dozen bytecodes (BENCHMARKS.md, change 88). A process that drains
// a long queue in every step, or computes, is compiled as before.
//
// A process hot on its core is compiled whatever its steps' length: one
// that took at least one step in kJitHotShare of its thread's, at each of
// kJitHotSamples sampled steps in a row (2048 steps). Its traces are used
// again before the cache loses them: compiled, PingPong's pair and
// Chameneos's mall ran faster here, where a ring's 100 nodes (each
// one step in 50 of its core's) ran slower (BENCHMARKS.md, change
// 90).
inline constexpr std::uint32_t kJitWarmupInstructions = 100000;
inline constexpr std::uint32_t kJitHotShare = 4;
inline constexpr std::uint8_t kJitHotSamples = 64;
inline constexpr std::uint32_t kJitLongStepFirings = 4;
inline constexpr std::uint32_t kJitProbeSteps = 8;
inline constexpr std::uint32_t kJitSampleSteps = 32;
inline constexpr int kJitHookInterval = 1000;

// A Lua process's collector starts a cycle once its heap reaches this
// percentage of what the last cycle left alive (LuaJIT's default is 200).
// A process that handles messages allocates a table for each, and every
// cycle marks all of its live heap again: at 300 a busy process runs half
// as many cycles for at most 1.5 times the heap (less work on ThreadRing 100,
// Big and PingPong: BENCHMARKS.md's source figures); an idle one is not affected.
inline constexpr int kLuaGcPause = 300;
// Where gc_pressure cannot lower the threshold near the memory limit
// (built without the LuaJIT seam), cycles start at this pause instead, so
// that a process keeping half its limit alive while it makes garbage still
// collects in time: the public API has no way to move a cycle's start
// within a step, and LuaJIT collects nothing when an allocation fails.
inline constexpr int kLuaGcPauseUnpressed = 150;

// A Lua process's step hands the kernel its events this many at a time and
// runs its tasks after each batch (bindings/lua_process.cpp, step_body).
inline constexpr std::size_t kDeliverBatch = 64;

// A Lua process's send to another process whose queue of events not yet
// taken by a step is at least this long yields to other processes after
// it (process.send still returns true): the sender slows to the pace its
// receiver keeps, as BEAM charges a sender to a long queue. Without it a
// producer that outran its consumer filled memory at its full speed
// (Counting: 103 MB peak RSS on one worker, 319 MB in a slow two-worker
// run; 7-13 MB with it). 1024 events are about 100 KB. For memory, not
// speed: Counting's slow runs stay (BENCHMARKS.md, change 66).
inline constexpr std::size_t kSendBacklogYield = 1024;

// A process whose step took fewer than kStreamBatch events while more came
// in (a stream's consumer: its step ends and it is requeued at once) is
// given time to gather a batch before it runs again, on a worker with
// nothing else to run anywhere: its worker waits while its events keep
// coming, each within kStreamQuiet of the one before, until kStreamBatch
// are there or kStreamWait has passed (Worker::gather_batch). Two cores
// passing a stream in steps of a few events move its queue's cache lines
// between them at every step: Counting on two workers was slower than on
// one, and is faster with this (BENCHMARKS.md,
// change 68). What it costs: a stream's events wait up to kStreamWait
// more, and a step that a request ends waits kStreamQuiet when nothing
// else comes (a plain wait of a few microseconds made Chameneos far slower). Not
// when all that came during the step was the process's own doing (sends
// to itself, commands completed inline): those are all there already
// (change 91).
inline constexpr std::uint32_t kStreamBatch = 128;
inline constexpr std::chrono::nanoseconds kStreamQuiet{500};
inline constexpr std::chrono::microseconds kStreamWait{20};

// Lua state arenas (bindings/state_arena.hpp): chunks of closed states wait
// in a pool of their kind (first, second or later chunks) for the next
// states. Each thread keeps up to twice the batch itself and trades whole
// batches with the shared pools, which keep at most kArenaPoolMaxChunks each
// (256 MB of 16 KB chunks) and free the rest (a first or second chunk,
// carved from a slab, gives back its inner pages, if it has any), so a
// burst of 100k processes does not pin its peak memory forever.
inline constexpr std::size_t kArenaLocalBatch = 32;
inline constexpr std::size_t kArenaPoolMaxChunks = 16384;

// Threads for command handlers that must block (file I/O, DNS, ...).
inline constexpr unsigned kBlockingPoolThreads = 2;

// Grace period between the cancel events of a shutdown and the force close.
inline constexpr std::chrono::milliseconds kDefaultShutdownGrace{5000};
// How long shutdown waits for the workers to leave their loops when the
// grace has run out already: an idle or spinning worker leaves at once; one
// still in a step past that is given up (Worker::join_until).
inline constexpr std::chrono::milliseconds kJoinAllowance{250};
// How long past the grace period the host program waits for shutdown
// itself (closing states, stopping services) before it exits regardless.
inline constexpr std::chrono::milliseconds kShutdownOverrun{1000};

}  // namespace host::config
