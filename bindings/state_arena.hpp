// StateArena: the memory allocator behind one Lua state. Threads: one at a
// time (whichever thread runs the state); the chunk pool behind it is shared
// by all threads.
//
// Why not malloc: a process's state makes about a thousand small
// allocations when it starts and frees them all when it exits, and a message
// makes and frees a few more. glibc's malloc spent a third of a spawn and a
// sixth of a ping-pong round trip in malloc/free (perf), and a state created
// on one worker and closed on another freed into another thread's arena.
// Here small blocks come from per-size-class free lists carved out of 16 KB
// chunks; closing a state gives its chunks back whole (no free per object),
// and the next state takes them with their pages already mapped.
//
// Blocks above kMaxSmall (big strings, big table parts, the global state)
// go to malloc. LuaJIT always passes the exact old size to its allocator,
// which is how a free or a realloc knows a block's class.
#pragma once

#include <cstddef>

namespace host::lua {

class StateArena {
 public:
  static constexpr std::size_t kChunkBytes = 16 * 1024;
  static constexpr std::size_t kMaxSmall = 2048;

  StateArena() = default;
  StateArena(const StateArena&) = delete;
  StateArena& operator=(const StateArena&) = delete;
  ~StateArena() { release(); }

  // nullptr when the system is out of memory.
  void* allocate(std::size_t n);
  void free(void* p, std::size_t n);
  void* reallocate(void* p, std::size_t old_size, std::size_t new_size);

  // From now on small frees are no-ops: the state is being closed and
  // release() reclaims its chunks whole. Large blocks are still freed.
  void begin_teardown() { tearing_down_ = true; }
  // Hands every chunk back to the pool. Every block is invalid afterwards.
  void release();

  // Forgets every chunk without giving it back: for a state that must never
  // be freed (a thread stopped inside it).
  void abandon() { chunk_list_ = nullptr; chunks_ = 0; bump_ = limit_ = nullptr; }

  std::size_t chunk_count() const { return chunks_; }

 private:
  struct FreeBlock {
    FreeBlock* next;
  };
  static constexpr std::size_t kClasses = 16 + (kMaxSmall - 256) / 64;  // 16-byte steps to 256, then 64

  static std::size_t class_of(std::size_t n);
  static std::size_t class_size(std::size_t c);
  void* carve(std::size_t size);

  FreeBlock* free_lists_[kClasses] = {};
  char* bump_ = nullptr;    // next unused byte of the newest chunk
  char* limit_ = nullptr;   // its end
  void* chunk_list_ = nullptr;  // chunks linked through their first word
  std::size_t chunks_ = 0;
  bool tearing_down_ = false;
};

}  // namespace host::lua
