// ChunkPool: taking, giving back, slabs and the cap.
#include "bindings/chunk_pool.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

namespace host::lua {

void ChunkPool::take(std::vector<void*>& out, std::size_t n) {
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

void ChunkPool::give(std::vector<void*>& in, std::size_t n) {
  std::lock_guard lock(mu_);
  while (n-- > 0 && !in.empty()) {
    void* c = in.back();
    in.pop_back();
    if (free_.size() < cap_) {
      free_.push_back(c);
    } else if (slabs_) {
      drop_inner_pages(c);
      free_.push_back(c);
    } else {
      std::free(c);
    }
  }
}

std::size_t ChunkPool::pooled() const {
  std::lock_guard lock(mu_);
  return free_.size();
}

void* ChunkPool::carve_from_slab() {
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

void ChunkPool::drop_inner_pages(void* c) const {
  // Only the pages wholly inside the chunk: those at its edges are shared
  // with its neighbours, which may be in use.
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<std::uintptr_t>(c) + page - 1) & ~(page - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(c) + chunk_bytes_) & ~(page - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

}  // namespace host::lua
