// StateArena: size classes, chunk carving, and the chunk pool shared by all
// states.
#include "bindings/state_arena.hpp"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "host/config.hpp"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define ARENA_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define ARENA_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define ARENA_POISON(p, n) ((void)(p), (void)(n))
#define ARENA_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace host::lua {

namespace {

// A chunk starts with one header line (16 bytes, to keep blocks 16-byte
// aligned) whose first word links the arena's chunks together.
constexpr std::size_t kHeader = 16;

// The chunks no state holds. Any thread; free_ is guarded by mu_.
class ChunkPool {
 public:
  // Moves up to n chunks into out.
  void take(std::vector<void*>& out, std::size_t n) {
    std::lock_guard lock(mu_);
    while (n-- > 0 && !free_.empty()) {
      out.push_back(free_.back());
      free_.pop_back();
    }
  }
  // Takes the last n chunks of in; frees those beyond the pool's cap.
  void give(std::vector<void*>& in, std::size_t n) {
    std::lock_guard lock(mu_);
    while (n-- > 0 && !in.empty()) {
      void* c = in.back();
      in.pop_back();
      if (free_.size() < config::kArenaPoolMaxChunks) free_.push_back(c);
      else std::free(c);
    }
  }

 private:
  std::mutex mu_;
  std::vector<void*> free_;
};

// Never destroyed: states may close while static destructors run.
ChunkPool& pool() {
  static ChunkPool* p = new ChunkPool;
  return *p;
}

// Each thread's own chunks, so most takes and gives touch no lock. Given
// back to the pool when the thread ends.
struct LocalChunks {
  std::vector<void*> chunks;
  ~LocalChunks() { pool().give(chunks, chunks.size()); }
};
thread_local LocalChunks local;

void* take_chunk() {
  auto& mine = local.chunks;
  if (mine.empty()) pool().take(mine, config::kArenaLocalBatch);
  if (mine.empty()) return std::malloc(StateArena::kChunkBytes);
  void* c = mine.back();
  mine.pop_back();
  return c;
}

void give_chunk(void* c) {
  auto& mine = local.chunks;
  mine.push_back(c);
  if (mine.size() > 2 * config::kArenaLocalBatch) pool().give(mine, config::kArenaLocalBatch);
}

}  // namespace

std::size_t StateArena::class_of(std::size_t n) {
  if (n <= 256) return (n + 15) / 16 - (n ? 1 : 0);
  return 15 + (n - 256 + 63) / 64;
}

std::size_t StateArena::class_size(std::size_t c) {
  if (c < 16) return (c + 1) * 16;
  return 256 + (c - 15) * 64;
}

void* StateArena::carve(std::size_t size) {
  if (bump_ == nullptr || static_cast<std::size_t>(limit_ - bump_) < size) {
    // The tail of the old chunk (less than one block) stays unused.
    void* c = take_chunk();
    if (!c) return nullptr;
    ARENA_POISON(static_cast<char*>(c) + kHeader, kChunkBytes - kHeader);
    *static_cast<void**>(c) = chunk_list_;
    chunk_list_ = c;
    ++chunks_;
    bump_ = static_cast<char*>(c) + kHeader;
    limit_ = static_cast<char*>(c) + kChunkBytes;
  }
  void* p = bump_;
  bump_ += size;
  return p;
}

void* StateArena::allocate(std::size_t n) {
  if (n > kMaxSmall) return std::malloc(n);
  std::size_t c = class_of(n);
  std::size_t size = class_size(c);
  void* p;
  if (FreeBlock* b = free_lists_[c]) {
    ARENA_UNPOISON(b, sizeof(FreeBlock));
    free_lists_[c] = b->next;
    p = b;
  } else {
    p = carve(size);
    if (!p) return nullptr;
  }
  ARENA_UNPOISON(p, size);
  return p;
}

void StateArena::free(void* p, std::size_t n) {
  if (!p) return;
  if (n > kMaxSmall) {
    std::free(p);
    return;
  }
  if (tearing_down_) return;
  std::size_t c = class_of(n);
  auto* b = static_cast<FreeBlock*>(p);
  b->next = free_lists_[c];
  free_lists_[c] = b;
  ARENA_POISON(p, class_size(c));
}

void* StateArena::reallocate(void* p, std::size_t old_size, std::size_t new_size) {
  if (!p) return allocate(new_size);
  if (old_size > kMaxSmall && new_size > kMaxSmall) return std::realloc(p, new_size);
  if (old_size <= kMaxSmall && new_size <= kMaxSmall && class_of(old_size) == class_of(new_size)) return p;
  void* q = allocate(new_size);
  if (!q) return nullptr;
  std::memcpy(q, p, old_size < new_size ? old_size : new_size);
  free(p, old_size);
  return q;
}

void StateArena::release() {
  void* c = chunk_list_;
  while (c) {
    ARENA_UNPOISON(c, kHeader);
    void* next = *static_cast<void**>(c);
    ARENA_POISON(static_cast<char*>(c) + kHeader, kChunkBytes - kHeader);
    give_chunk(c);
    c = next;
  }
  chunk_list_ = nullptr;
  chunks_ = 0;
  bump_ = limit_ = nullptr;
  for (auto& l : free_lists_) l = nullptr;
  tearing_down_ = false;
}

}  // namespace host::lua
