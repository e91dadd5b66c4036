// StateArena: size classes, chunk carving, and each thread's chunks in
// front of the shared pools.
#include "bindings/state_arena.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bindings/chunk_pool.hpp"
#include "host/config.hpp"

namespace host::lua {

namespace {

// A chunk starts with one header line (16 bytes, to keep blocks 16-byte
// aligned): its first word links the arena's chunks together, its second
// says the chunk's kind (release gives it back to that kind's pool).
constexpr std::size_t kHeader = 16;

// Three kinds of chunk, each with its own pool (chunk_pool.hpp): a state's
// first chunk (kFirstChunkBytes, all an idle process keeps) and its second
// (kSecondChunkBytes) carved from slabs, so that a process costs about its
// chunks' bytes of RSS; later chunks (kChunkBytes) from malloc.
enum Kind : std::size_t { kLater, kFirst, kSecond, kKinds };

constexpr std::size_t bytes_of(std::size_t kind) {
  return kind == kFirst ? StateArena::kFirstChunkBytes
                        : kind == kSecond ? StateArena::kSecondChunkBytes : StateArena::kChunkBytes;
}

// Never destroyed: states may close while static destructors run.
ChunkPool& pool(std::size_t kind) {
  static ChunkPool* pools[kKinds] = {
      new ChunkPool(bytes_of(kLater), false, config::kArenaPoolMaxChunks),
      new ChunkPool(bytes_of(kFirst), true, config::kArenaPoolMaxChunks),
      new ChunkPool(bytes_of(kSecond), true, config::kArenaPoolMaxChunks),
  };
  return *pools[kind];
}

// Each thread's own chunks of each kind, so most takes and gives touch no
// lock. Given back to the pools when the thread ends.
struct LocalChunks {
  std::vector<void*> chunks[kKinds];
  ~LocalChunks() {
    for (std::size_t k = 0; k < kKinds; ++k) pool(k).give(chunks[k], chunks[k].size());
  }
};
thread_local LocalChunks local;

void* take_chunk(std::size_t kind) {
  auto& mine = local.chunks[kind];
  if (mine.empty()) pool(kind).take(mine, config::kArenaLocalBatch);
  if (mine.empty()) return kind == kLater ? std::malloc(StateArena::kChunkBytes) : nullptr;
  void* c = mine.back();
  mine.pop_back();
  return c;
}

void give_chunk(void* c, std::size_t kind) {
  auto& mine = local.chunks[kind];
  mine.push_back(c);
  if (mine.size() > 2 * config::kArenaLocalBatch) pool(kind).give(mine, config::kArenaLocalBatch);
}

}  // namespace

void* StateArena::allocate_slow(std::size_t n) {
  if (n > kMaxSmall) return allocate_large(n);
  return carve_from_new_chunk(class_size(class_of(n)));
}

void* StateArena::carve_from_new_chunk(std::size_t size) {
  // The tail of the old chunk (less than one block) stays unused. A block
  // the second chunk cannot hold skips it: a later chunk instead.
  std::size_t kind = kLater;
  if (chunks_ == 0) kind = kFirst;
  else if (chunks_ == 1 && size <= kSecondChunkBytes - kHeader) kind = kSecond;
  void* c = take_chunk(kind);
  if (!c) return nullptr;
  const std::size_t bytes = bytes_of(kind);
  ARENA_POISON(static_cast<char*>(c) + kHeader, bytes - kHeader);
  static_cast<void**>(c)[0] = chunk_list_;
  static_cast<std::size_t*>(c)[1] = kind;
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
    void* next = static_cast<void**>(c)[0];
    const std::size_t kind = static_cast<std::size_t*>(c)[1];
    ARENA_POISON(static_cast<char*>(c) + kHeader, bytes_of(kind) - kHeader);
    give_chunk(c, kind);
    c = next;
  }
  chunk_list_ = nullptr;
  chunks_ = 0;
  bump_ = limit_ = nullptr;
  for (auto& l : free_lists_) l = nullptr;
  tearing_down_ = false;
}

}  // namespace host::lua
