// StateArena: the memory allocator behind one Lua state. Threads: one at a
// time (whichever thread runs the state); the chunk pool behind it is shared
// by all threads.
//
// Why not malloc: a process's state makes about a thousand small
// allocations when it starts and frees them all when it exits, and a message
// makes and frees a few more. glibc's malloc spent a third of a spawn and a
// sixth of a ping-pong round trip in malloc/free (perf), and a state created
// on one worker and closed on another freed into another thread's arena.
// Here small blocks come from per-size-class free lists carved out of
// chunks: a state's first one of 13.5 KB (what an idle process holds, an
// idle echo connection's process too), its second of 1 KB (for a process
// just past that), both carved side by side from slabs so that they
// cost their bytes, not whole pages, of RSS; the later ones of 16 KB.
// Closing a state gives its chunks back whole (no free per object), and the
// next state takes them with their pages already mapped.
//
// Blocks above kMaxSmall (big strings, big table parts, the global state)
// go to malloc, on a list the arena keeps, so that release() frees them too:
// a state whose close would only free memory need not be closed at all
// (LuaProcess::Close). LuaJIT always passes the exact old size to its
// allocator, which is how a free or a realloc knows a block's class.
//
// The small paths are inline: a spawn makes about 300 allocations.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define ARENA_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define ARENA_POISON(p, n) ((void)(p), (void)(n))
#define ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace host::lua {

class StateArena {
 public:
  static constexpr std::size_t kChunkBytes = 16 * 1024;
  // A state's first chunk: an idle process's heap fits it (12.7 KB of
  // live blocks, 13.1 KB in the size classes, for tests/lua/
  // test_processes.lua's idle module; an idle echo connection's 13.2 KB),
  // with room for a few hundred bytes more; see chunk_pool.hpp for why it
  // is not a whole number of pages. It was 14 KB until package.loaded
  // reused lua_newstate's registry (BENCHMARKS.md, "An idle connection
  // within its first chunk"): each half KB less is a half KB less RSS for
  // every idle process.
  static constexpr std::size_t kFirstChunkBytes = 13 * 1024 + 512;
  // Its second: a process just past its first chunk pays 1 KB for it,
  // where a 16 KB chunk cost it the 4 KB page it touched. A block that
  // does not fit it (over 1 KB less the header) opens a 16 KB chunk
  // instead.
  static constexpr std::size_t kSecondChunkBytes = 1024;
  static constexpr std::size_t kMaxSmall = 2048;

  StateArena() = default;
  StateArena(const StateArena&) = delete;
  StateArena& operator=(const StateArena&) = delete;
  ~StateArena() { release(); }

  // nullptr when the system is out of memory.
  void* allocate(std::size_t n) {
    if (void* p = try_allocate_small(n)) return p;
    return allocate_slow(n);
  }

  // A small block from its class's free list or the newest chunk's unused
  // part; nullptr when n is large or the chunk is full (allocate then
  // takes a new chunk or mallocs). Calls nothing: the state's allocator,
  // whose fast path this is, then saves no registers (a large part of its
  // work when it called out: BENCHMARKS.md's source figures).
  void* try_allocate_small(std::size_t n) {
    if (n > kMaxSmall) return nullptr;
    const std::size_t c = class_of(n);
    const std::size_t size = class_size(c);
    if (FreeBlock* b = free_lists_[c]) {
      ARENA_UNPOISON(b, sizeof(FreeBlock));
      FreeBlock* next = b->next;
      free_lists_[c] = next;
      // The next block of the class is read when it is handed out (its
      // link), often long after the collector freed it: fetched now, that
      // read hits the cache (the link's load was half of this function's
      // samples in PingPong, perf). A prefetch of null is harmless.
      __builtin_prefetch(next);
      ARENA_UNPOISON(b, size);
      return b;
    }
    if (static_cast<std::size_t>(limit_ - bump_) < size) return nullptr;
    void* p = bump_;
    bump_ += size;
    ARENA_UNPOISON(p, size);
    return p;
  }

  // A block that lives as long as the arena (LuaJIT's global state: the
  // state's first allocation, 6.3 KB, freed only when the state closes).
  // Carved from a chunk like the small blocks rather than malloc'd beside
  // them, so it shares the chunk's pages; never free()d alone, release()
  // takes it with its chunk. nullptr when out of memory.
  void* allocate_for_life(std::size_t n);

  void free(void* p, std::size_t n) {
    if (!p) return;
    if (n > kMaxSmall) return free_large(p);
    if (tearing_down_) return;
    const std::size_t c = class_of(n);
    auto* b = static_cast<FreeBlock*>(p);
    b->next = free_lists_[c];
    free_lists_[c] = b;
    ARENA_POISON(p, class_size(c));
  }

  void* reallocate(void* p, std::size_t old_size, std::size_t new_size) {
    if (!p) return allocate(new_size);
    if (old_size > kMaxSmall && new_size > kMaxSmall) return reallocate_large(p, new_size);
    if (old_size <= kMaxSmall && new_size <= kMaxSmall && class_of(old_size) == class_of(new_size)) return p;
    return move(p, old_size, new_size);
  }

  // From now on small frees are no-ops: the state is being closed and
  // release() reclaims its chunks whole. Large blocks are still freed.
  void begin_teardown() { tearing_down_ = true; }
  // Hands every chunk back to the pool and frees the large blocks still
  // held. Every block is invalid afterwards.
  void release();

  std::size_t chunk_count() const { return chunks_; }
  std::size_t large_count() const;

 private:
  struct FreeBlock {
    FreeBlock* next;
  };
  // In front of each large block: 16 bytes, so the block stays 16-aligned.
  struct LargeBlock {
    LargeBlock* prev;
    LargeBlock* next;
  };
  // 16-byte steps to 256, then 128: above 256 bytes LuaJIT allocates
  // mostly power-of-two table parts (multiples of 128) and coroutine
  // stacks. 30 free lists: the arena lives in the process object, which
  // then fits malloc's 1 KB class (a finer 64-byte step took 44 lists and
  // put it in the 1.25 KB class).
  static constexpr std::size_t kClasses = 16 + (kMaxSmall - 256) / 128;

  static constexpr std::size_t class_of(std::size_t n) {
    if (n <= 256) return (n + 15) / 16 - (n ? 1 : 0);
    return 15 + (n - 256 + 127) / 128;
  }
  static constexpr std::size_t class_size(std::size_t c) { return c < 16 ? (c + 1) * 16 : 256 + (c - 15) * 128; }

  // allocate's other cases, once try_allocate_small found nothing: a large
  // block, or a small one from a new chunk.
  void* allocate_slow(std::size_t n);
  void* carve_from_new_chunk(std::size_t size);
  void* move(void* p, std::size_t old_size, std::size_t new_size);
  void* allocate_large(std::size_t n);
  void free_large(void* p);
  void* reallocate_large(void* p, std::size_t n);
  void link_large(LargeBlock* b);
  void unlink_large(LargeBlock* b);

  // bump_ and limit_ first, beside the small classes' lists (a message's
  // tables): the line an allocation reads (see LuaProcess's members).
  char* bump_ = nullptr;    // next unused byte of the newest chunk
  char* limit_ = nullptr;   // its end
  FreeBlock* free_lists_[kClasses] = {};
  void* chunk_list_ = nullptr;  // chunks linked through their first word
  std::size_t chunks_ = 0;
  LargeBlock* large_ = nullptr;  // the large blocks, newest first
  bool tearing_down_ = false;
};

}  // namespace host::lua
