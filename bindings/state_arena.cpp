// StateArena: size classes, chunk carving, and the chunk pool shared by all
// states.
#include "bindings/state_arena.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "host/config.hpp"

namespace host::lua {

namespace {

// A chunk starts with one header line (16 bytes, to keep blocks 16-byte
// aligned) whose first word links the arena's chunks together.
constexpr std::size_t kHeader = 16;

// Two kinds of chunk, each with its own pool. A state's first chunk
// (kFirstChunkBytes) holds all an idle process keeps; first chunks are
// carved side by side out of slabs of kSlabChunks, so neighbours share the
// pages at their edges and an idle process costs about its chunk's bytes of
// RSS, not a whole number of pages (16 KB chunks from malloc cost every idle
// process 4 pages for about 15 KB). Later chunks (kChunkBytes) come from
// malloc. Slabs are never unmapped; a first chunk the pool has no room for
// gives its inner pages back to the system instead (madvise).
constexpr std::size_t kSlabChunks = 256;

// The chunks no state holds. Any thread; everything is guarded by mu_.
class ChunkPool {
 public:
  ChunkPool(std::size_t chunk_bytes, bool slabs) : chunk_bytes_(chunk_bytes), slabs_(slabs) {}

  // Moves up to n chunks into out: pooled ones, else new slab chunks.
  void take(std::vector<void*>& out, std::size_t n) {
    std::lock_guard lock(mu_);
    while (n > 0 && !free_.empty()) {
      out.push_back(free_.back());
      free_.pop_back();
      --n;
    }
    while (slabs_ && n-- > 0) {
      void* c = carve_from_slab();
      if (!c) break;
      out.push_back(c);
    }
  }
  // Takes the last n chunks of in; frees those beyond the pool's cap (a
  // slab chunk keeps its place in the pool, without its inner pages).
  void give(std::vector<void*>& in, std::size_t n) {
    std::lock_guard lock(mu_);
    while (n-- > 0 && !in.empty()) {
      void* c = in.back();
      in.pop_back();
      if (free_.size() < config::kArenaPoolMaxChunks) {
        free_.push_back(c);
      } else if (slabs_) {
        drop_inner_pages(c);
        free_.push_back(c);
      } else {
        std::free(c);
      }
    }
  }

 private:
  void* carve_from_slab() {
    if (slab_next_ == slab_end_) {
      const std::size_t bytes = chunk_bytes_ * kSlabChunks;
      void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED) return nullptr;
      // Small pages only: where transparent huge pages are on for every
      // mapping, a slab's first touch would make 2 MB of it resident.
      madvise(m, bytes, MADV_NOHUGEPAGE);
      slab_next_ = static_cast<char*>(m);
      slab_end_ = slab_next_ + bytes;
    }
    void* c = slab_next_;
    slab_next_ += chunk_bytes_;
    return c;
  }
  void drop_inner_pages(void* c) const {
    const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto begin = (reinterpret_cast<std::uintptr_t>(c) + page - 1) & ~(page - 1);
    const auto end = (reinterpret_cast<std::uintptr_t>(c) + chunk_bytes_) & ~(page - 1);
    if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }

  const std::size_t chunk_bytes_;
  const bool slabs_;
  std::mutex mu_;
  std::vector<void*> free_;
  char* slab_next_ = nullptr;
  char* slab_end_ = nullptr;
};

// Never destroyed: states may close while static destructors run.
ChunkPool& pool(bool first) {
  static ChunkPool* p = new ChunkPool(StateArena::kChunkBytes, false);
  static ChunkPool* f = new ChunkPool(StateArena::kFirstChunkBytes, true);
  return first ? *f : *p;
}

// Each thread's own chunks of each kind, so most takes and gives touch no
// lock. Given back to the pools when the thread ends.
struct LocalChunks {
  std::vector<void*> chunks[2];  // [later, first]
  ~LocalChunks() {
    for (bool first : {false, true}) pool(first).give(chunks[first], chunks[first].size());
  }
};
thread_local LocalChunks local;

void* take_chunk(bool first) {
  auto& mine = local.chunks[first];
  if (mine.empty()) pool(first).take(mine, config::kArenaLocalBatch);
  if (mine.empty()) return first ? nullptr : std::malloc(StateArena::kChunkBytes);
  void* c = mine.back();
  mine.pop_back();
  return c;
}

void give_chunk(void* c, bool first) {
  auto& mine = local.chunks[first];
  mine.push_back(c);
  if (mine.size() > 2 * config::kArenaLocalBatch) pool(first).give(mine, config::kArenaLocalBatch);
}

}  // namespace

void* StateArena::allocate_slow(std::size_t n) {
  if (n > kMaxSmall) return allocate_large(n);
  return carve_from_new_chunk(class_size(class_of(n)));
}

void* StateArena::carve_from_new_chunk(std::size_t size) {
  // The tail of the old chunk (less than one block) stays unused.
  const bool first = chunk_list_ == nullptr;
  const std::size_t bytes = first ? kFirstChunkBytes : kChunkBytes;
  void* c = take_chunk(first);
  if (!c) return nullptr;
  ARENA_POISON(static_cast<char*>(c) + kHeader, bytes - kHeader);
  *static_cast<void**>(c) = chunk_list_;
  chunk_list_ = c;
  ++chunks_;
  char* p = static_cast<char*>(c) + kHeader;
  bump_ = p + size;
  limit_ = static_cast<char*>(c) + bytes;
  ARENA_UNPOISON(p, size);
  return p;
}

void* StateArena::move(void* p, std::size_t old_size, std::size_t new_size) {
  void* q = allocate(new_size);
  if (!q) return nullptr;
  std::memcpy(q, p, old_size < new_size ? old_size : new_size);
  free(p, old_size);
  return q;
}

void StateArena::link_large(LargeBlock* b) {
  b->prev = nullptr;
  b->next = large_;
  if (large_) large_->prev = b;
  large_ = b;
}

void StateArena::unlink_large(LargeBlock* b) {
  if (b->prev) b->prev->next = b->next;
  else large_ = b->next;
  if (b->next) b->next->prev = b->prev;
}

void* StateArena::allocate_for_life(std::size_t n) {
  const std::size_t size = (n + 15) & ~std::size_t{15};
  if (size > kFirstChunkBytes - kHeader) return allocate_large(n);
  if (static_cast<std::size_t>(limit_ - bump_) < size) return carve_from_new_chunk(size);
  void* p = bump_;
  bump_ += size;
  ARENA_UNPOISON(p, size);
  return p;
}

void* StateArena::allocate_large(std::size_t n) {
  auto* b = static_cast<LargeBlock*>(std::malloc(sizeof(LargeBlock) + n));
  if (!b) return nullptr;
  link_large(b);
  return b + 1;
}

void StateArena::free_large(void* p) {
  LargeBlock* b = static_cast<LargeBlock*>(p) - 1;
  unlink_large(b);
  std::free(b);
}

void* StateArena::reallocate_large(void* p, std::size_t n) {
  LargeBlock* b = static_cast<LargeBlock*>(p) - 1;
  unlink_large(b);
  auto* q = static_cast<LargeBlock*>(std::realloc(b, sizeof(LargeBlock) + n));
  link_large(q ? q : b);  // a failed realloc leaves the old block as it was
  return q ? q + 1 : nullptr;
}

std::size_t StateArena::large_count() const {
  std::size_t n = 0;
  for (const LargeBlock* b = large_; b; b = b->next) ++n;
  return n;
}

void StateArena::release() {
  while (large_) free_large(large_ + 1);
  void* c = chunk_list_;
  while (c) {
    ARENA_UNPOISON(c, kHeader);
    void* next = *static_cast<void**>(c);
    const bool first = next == nullptr;  // the oldest chunk, last on the list
    ARENA_POISON(static_cast<char*>(c) + kHeader, (first ? kFirstChunkBytes : kChunkBytes) - kHeader);
    give_chunk(c, first);
    c = next;
  }
  chunk_list_ = nullptr;
  chunks_ = 0;
  bump_ = limit_ = nullptr;
  for (auto& l : free_lists_) l = nullptr;
  tearing_down_ = false;
}

}  // namespace host::lua
