// ChunkPool: the arena chunks (bindings/state_arena.hpp) that no state holds,
// of one size, shared by all threads. Threads: any; every call takes the
// pool's lock (each thread trades whole batches with it, so the lock is
// taken once per batch, not per chunk).
//
// A pool of slab chunks (a state's first chunks, or its second) carves new
// chunks side by side out of mmap'd slabs of kSlabChunks, so that
// neighbours share the pages at their edges and an idle process costs about
// its chunks' bytes of RSS, not a whole number of pages. Slabs are never unmapped: a slab chunk
// given back beyond the pool's cap stays pooled but gives its inner pages
// back to the system (madvise), so that a burst of processes does not pin
// its peak memory. A pool of malloc'd chunks frees those beyond its cap.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

namespace host::lua {

class ChunkPool {
 public:
  static constexpr std::size_t kSlabChunks = 256;

  // Chunks of chunk_bytes; `slabs`: carved from slabs (else the caller
  // mallocs them and take() makes none); `cap`: how many pooled chunks keep
  // their memory.
  ChunkPool(std::size_t chunk_bytes, bool slabs, std::size_t cap)
      : chunk_bytes_(chunk_bytes), slabs_(slabs), cap_(cap) {}
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  // Moves up to n chunks into out: pooled ones, else (a slab pool) new
  // slab chunks. Fewer only where the system refuses a slab.
  void take(std::vector<void*>& out, std::size_t n);
  // Takes the last n chunks of in (fewer if in has fewer). Those beyond the
  // cap are freed, or, slab chunks, kept without their inner pages.
  void give(std::vector<void*>& in, std::size_t n);
  // How many chunks the pool holds now.
  std::size_t pooled() const;

 private:
  void* carve_from_slab();
  void drop_inner_pages(void* c) const;

  const std::size_t chunk_bytes_;
  const bool slabs_;
  const std::size_t cap_;
  mutable std::mutex mu_;
  std::vector<void*> free_;
  char* slab_next_ = nullptr;
  char* slab_end_ = nullptr;
};

}  // namespace host::lua
