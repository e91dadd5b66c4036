// Tests of the Lua state allocator (bindings/state_arena.hpp): blocks keep
// their contents and never overlap, reallocation preserves data across size
// classes and into malloc's range, released chunks are reused, a full Lua
// state runs on it (and can be dropped without lua_close: the arena frees
// its large blocks too), a block for the arena's life shares its chunk, and
// arenas on several threads trade chunks through the shared pool without
// losing or sharing one. A state's first chunk is the smaller kind, its
// second smaller still (and skipped by a block it cannot hold), and
// lua_newstate's globals hash part is the block small_globals takes for it.
// A chunk pool keeps what it is given up to its cap; past it a slab chunk
// keeps its place without its inner pages, a malloc'd one is freed.
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <lua.hpp>

#include "bindings/chunk_pool.hpp"
#include "bindings/luajit/small_globals.hpp"
#include "bindings/state_arena.hpp"
#include "tests/watchdog.hpp"

using host::lua::ChunkPool;
using host::lua::StateArena;
using host::testing::Watchdog;
using namespace std::chrono_literals;

namespace {

struct Block {
  unsigned char* p;
  std::size_t n;
  unsigned char fill;
};

void fill(Block& b) { std::memset(b.p, b.fill, b.n); }

bool intact(const Block& b) {
  return std::all_of(b.p, b.p + b.n, [&](unsigned char c) { return c == b.fill; });
}

// Random allocations, frees and reallocations; every live block keeps its
// fill byte, so an overlap or a lost copy shows up as a changed byte.
void churn(StateArena& arena, std::uint32_t seed, int rounds) {
  std::mt19937 rng(seed);
  std::vector<Block> live;
  for (int i = 0; i < rounds; ++i) {
    int op = static_cast<int>(rng() % 10);
    if (op < 5 || live.empty()) {
      std::size_t n = 1 + rng() % (rng() % 8 == 0 ? 6000 : 300);
      Block b{static_cast<unsigned char*>(arena.allocate(n)), n, static_cast<unsigned char>(rng())};
      REQUIRE(b.p != nullptr);
      REQUIRE(reinterpret_cast<std::uintptr_t>(b.p) % 16 == 0);
      fill(b);
      live.push_back(b);
    } else if (op < 8) {
      std::size_t k = rng() % live.size();
      REQUIRE(intact(live[k]));
      arena.free(live[k].p, live[k].n);
      live[k] = live.back();
      live.pop_back();
    } else {
      Block& b = live[rng() % live.size()];
      REQUIRE(intact(b));
      std::size_t n = 1 + rng() % 5000;
      auto* q = static_cast<unsigned char*>(arena.reallocate(b.p, b.n, n));
      REQUIRE(q != nullptr);
      std::size_t kept = std::min(n, b.n);
      CHECK(std::all_of(q, q + kept, [&](unsigned char c) { return c == b.fill; }));
      b.p = q;
      b.n = n;
      fill(b);
    }
  }
  for (auto& b : live) REQUIRE(intact(b));
  for (auto& b : live) arena.free(b.p, b.n);
}

void* lua_alloc(void* ud, void* ptr, std::size_t osize, std::size_t nsize) {
  auto* arena = static_cast<StateArena*>(ud);
  if (nsize == 0) {
    arena->free(ptr, ptr ? osize : 0);
    return nullptr;
  }
  return arena->reallocate(ptr, ptr ? osize : 0, nsize);
}

// A state on the arena with the standard libraries, after running code.
lua_State* state_that_ran(StateArena& arena, const char* code) {
  lua_State* L = lua_newstate(lua_alloc, &arena);
  REQUIRE(L != nullptr);
  luaL_openlibs(L);
  REQUIRE(luaL_dostring(L, code) == 0);
  return L;
}

}  // namespace

TEST_CASE("arena blocks keep their contents through allocation, free and reallocation") {
  Watchdog dog("arena churn", 60s);
  StateArena arena;
  churn(arena, 1, 50000);
  CHECK(arena.chunk_count() > 0);
}

TEST_CASE("a freed block of a size class is handed out again before new memory") {
  StateArena arena;
  void* a = arena.allocate(40);
  arena.free(a, 40);
  CHECK(arena.allocate(33) == a);  // 33 and 40 share the 48-byte class
  // Above 256 bytes the classes are 128 bytes apart: 257..384 share one,
  // 385 starts the next, and 2048, the largest small block, has its own.
  void* c = arena.allocate(300);
  arena.free(c, 300);
  CHECK(arena.allocate(384) == c);
  void* d = arena.allocate(385);
  CHECK(d != c);
  std::memset(d, 7, 512);  // its class is 512 bytes: all of it is the block's
  arena.free(d, 385);
  CHECK(arena.allocate(512) == d);
  void* e = arena.allocate(2048);
  arena.free(e, 2048);
  CHECK(arena.allocate(1921) == e);
  std::size_t chunks = arena.chunk_count();
  for (int i = 0; i < 100; ++i) {
    void* b = arena.allocate(100);
    arena.free(b, 100);
  }
  CHECK(arena.chunk_count() == chunks);
}

TEST_CASE("try_allocate_small serves only what needs no new chunk and no malloc") {
  // The state's allocator takes this path first and falls back to
  // allocate: a block it returns must be one allocate would have given.
  StateArena arena;
  CHECK(arena.try_allocate_small(64) == nullptr);  // no chunk yet
  CHECK(arena.try_allocate_small(StateArena::kMaxSmall + 1) == nullptr);
  void* a = arena.allocate(64);
  REQUIRE(a != nullptr);
  CHECK(arena.chunk_count() == 1);
  void* b = arena.try_allocate_small(64);  // the chunk's unused part
  CHECK(b == static_cast<char*>(a) + 64);
  arena.free(a, 64);
  CHECK(arena.try_allocate_small(50) == a);  // the free list first (same 64-byte class)
  // Fill the chunk: then it answers nullptr and allocate takes a new one.
  while (arena.try_allocate_small(2048)) {
  }
  CHECK(arena.chunk_count() == 1);
  void* c = arena.allocate(2048);
  CHECK(c != nullptr);
  CHECK(arena.chunk_count() == 2);
  CHECK(arena.large_count() == 0);
}

TEST_CASE("a block for the arena's life shares a chunk with the small blocks and goes with release") {
  // LuaProcess puts LuaJIT's global state (6.3 KB) there: in the chunk,
  // an idle process touches one page less than with it malloc'd beside.
  StateArena arena;
  auto* small = static_cast<unsigned char*>(arena.allocate(64));
  auto* g = static_cast<unsigned char*>(arena.allocate_for_life(6400));
  REQUIRE(g != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(g) % 16 == 0);
  CHECK(arena.large_count() == 0);
  CHECK(arena.chunk_count() == 1);
  std::memset(small, 1, 64);
  std::memset(g, 9, 6400);
  auto* after = static_cast<unsigned char*>(arena.allocate(64));
  std::memset(after, 2, 64);
  CHECK((after >= g + 6400 || after + 64 <= g));
  CHECK(std::all_of(g, g + 6400, [](unsigned char c) { return c == 9; }));
  CHECK(std::all_of(small, small + 64, [](unsigned char c) { return c == 1; }));
  arena.release();
  CHECK(arena.chunk_count() == 0);
}

TEST_CASE("released chunks are reused by the next arena on the same thread") {
  // A fresh thread starts with an empty chunk cache of its own.
  std::thread([] {
    std::vector<void*> first;
    {
      StateArena arena;
      for (int i = 0; i < 200; ++i) first.push_back(arena.allocate(1000));
    }
    StateArena next;
    void* p = next.allocate(1000);
    // The chunks the first arena gave back are the newest in this thread's
    // cache, so p lies inside one of them.
    bool reused = std::any_of(first.begin(), first.end(), [&](void* q) {
      auto d = static_cast<char*>(p) - static_cast<char*>(q);
      return d > -static_cast<std::ptrdiff_t>(StateArena::kChunkBytes) &&
             d < static_cast<std::ptrdiff_t>(StateArena::kChunkBytes);
    });
    CHECK(reused);
  }).join();
}

TEST_CASE("a Lua state runs and closes on an arena, with teardown skipping small frees") {
  for (int round = 0; round < 3; ++round) {
    StateArena arena;
    lua_State* L = state_that_ran(arena,
                                  "local t = {} for i = 1, 20000 do t[i] = ('x'):rep(i % 300) .. i end "
                                  "local s = 0 for i = 1, #t do s = s + #t[i] end "
                                  "collectgarbage() assert(#t == 20000 and s > 0)");
    arena.begin_teardown();
    lua_close(L);
    arena.release();
    CHECK(arena.chunk_count() == 0);
  }
}

TEST_CASE("release frees the large blocks a state still holds, so a state can be dropped without lua_close") {
  // LuaProcess::Close skips lua_close for states without finalizers; the
  // arena must then own every byte (the leak checker of the ASan build
  // fails this test otherwise).
  StateArena arena;
  state_that_ran(arena,
                 "big = {} for i = 1, 50 do big[i] = ('y'):rep(5000 + i) end "
                 "grown = {} for i = 1, 3000 do grown[i] = i end");
  CHECK(arena.large_count() > 50);  // the strings, the array part, the global state
  void* large = arena.allocate(10000);
  std::memset(large, 7, 10000);
  large = arena.reallocate(large, 10000, 30000);  // a moved large block stays on the list
  CHECK(static_cast<unsigned char*>(large)[9999] == 7);
  arena.release();
  CHECK(arena.large_count() == 0);
  CHECK(arena.chunk_count() == 0);
}

TEST_CASE("arenas on several threads trade chunks through the pool without sharing one") {
  Watchdog dog("arenas on threads", 120s);
  for (int threads : {2, 4}) {
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([t] {
        for (int round = 0; round < 40; ++round) {
          StateArena arena;  // released (given back) at the end of each round
          churn(arena, static_cast<std::uint32_t>(t * 1000 + round), 3000);
        }
      });
    }
    for (auto& th : ts) th.join();
  }
}

TEST_CASE("a state's first chunk holds kFirstChunkBytes, its second kSecondChunkBytes, the later ones kChunkBytes") {
  // A fresh thread: its chunk cache holds only what this arena gives back.
  std::thread([] {
    // Counted in 128-byte blocks: a chunk gives its 16-byte header and any
    // tail shorter than a block to nothing else.
    StateArena arena;
    std::vector<unsigned char*> blocks;
    auto fill_chunk = [&] {
      const std::size_t before = arena.chunk_count();
      std::size_t n = 0;
      for (;;) {
        auto* p = static_cast<unsigned char*>(arena.allocate(128));
        REQUIRE(p != nullptr);
        std::memset(p, static_cast<int>(blocks.size() & 0xff), 128);
        blocks.push_back(p);
        if (arena.chunk_count() != before) return n;  // p opened the next chunk
        ++n;
      }
    };
    arena.allocate(128);  // opens the first chunk
    CHECK(arena.chunk_count() == 1);
    CHECK(fill_chunk() + 1 == (StateArena::kFirstChunkBytes - 16) / 128);
    const unsigned char* second = blocks.back();
    CHECK(fill_chunk() + 1 == (StateArena::kSecondChunkBytes - 16) / 128);
    const unsigned char* later = blocks.back();
    CHECK(fill_chunk() + 1 == (StateArena::kChunkBytes - 16) / 128);
    for (std::size_t i = 0; i < blocks.size(); ++i)
      REQUIRE(std::all_of(blocks[i], blocks[i] + 128, [&](unsigned char c) { return c == (i & 0xff); }));
    arena.release();
    CHECK(arena.chunk_count() == 0);
    // Released, the arena starts again from a first chunk, and each chunk
    // went back to its own kind's pool: this thread's newest of each kind
    // comes back as that kind (a 2 KB chunk taken as a 16 KB one would be
    // overrun).
    blocks.clear();
    arena.allocate(128);
    CHECK(fill_chunk() + 1 == (StateArena::kFirstChunkBytes - 16) / 128);
    CHECK(blocks.back() == second);
    CHECK(fill_chunk() + 1 == (StateArena::kSecondChunkBytes - 16) / 128);
    CHECK(blocks.back() == later);
  }).join();
}

TEST_CASE("a block the second chunk cannot hold opens a later chunk") {
  StateArena arena;
  arena.allocate(128);  // opens the first chunk
  while (arena.try_allocate_small(128) != nullptr) continue;  // fills it
  REQUIRE(arena.chunk_count() == 1);
  auto* big = static_cast<unsigned char*>(arena.allocate(StateArena::kMaxSmall));
  REQUIRE(big != nullptr);
  CHECK(arena.chunk_count() == 2);
  std::memset(big, 0x5a, StateArena::kMaxSmall);
  // The rest of that chunk holds the later chunk's room, not a 2 KB chunk's.
  std::size_t n = 0;
  while (arena.try_allocate_small(128)) ++n;
  CHECK(n == (StateArena::kChunkBytes - 16 - StateArena::kMaxSmall) / 128);
}

namespace {
// lua_newstate's allocator as LuaProcess has it: the first block of the
// globals hash part's size comes from small_globals' scratch, which must
// never come back.
struct ScratchState {
  StateArena arena;
  void* scratch = nullptr;
  bool handed = false;
  bool freed = false;
};

void* scratch_alloc(void* ud, void* ptr, std::size_t osize, std::size_t nsize) {
  auto* s = static_cast<ScratchState*>(ud);
  if (ptr && ptr == s->scratch) {
    s->freed = true;
    return nullptr;
  }
  if (!ptr && nsize == host::lua::small_globals::kHashBytes && !s->handed) {
    s->handed = true;
    return s->scratch;
  }
  return lua_alloc(&s->arena, ptr, osize, nsize);
}
}  // namespace

TEST_CASE("small_globals: lua_newstate's globals hash part is the scratch block, and once replaced never comes back") {
  // Were LuaJIT's table layout or allocation order other than
  // small_globals expects, LuaProcess would keep the big table (and every
  // idle process 1.4 KB more): this says whether it is as expected here.
  if (!host::lua::seam::kBuilt) {
    CHECK(host::lua::small_globals::take_scratch() == nullptr);  // built without the seam: LuaJIT's own table
    return;
  }
  for (int round = 0; round < 3; ++round) {
    ScratchState s;
    s.scratch = host::lua::small_globals::take_scratch();
    REQUIRE(s.scratch != nullptr);
    lua_State* L = lua_newstate(scratch_alloc, &s);
    REQUIRE(L != nullptr);
    REQUIRE(host::lua::small_globals::holds_globals(L, s.scratch));
    const void* first = lua_topointer(L, LUA_GLOBALSINDEX);
    bool replaced = false;
    REQUIRE(lua_cpcall(L, [](lua_State* S) -> int {
      *static_cast<bool*>(lua_touserdata(S, 1)) = host::lua::small_globals::replace(S);
      return 0;
    }, &replaced) == 0);
    CHECK(replaced);
    CHECK(lua_topointer(L, LUA_GLOBALSINDEX) != first);
    CHECK_FALSE(host::lua::small_globals::holds_globals(L, s.scratch));
    // The state runs on its new globals, through full collections that
    // free the first table, and closes: the scratch block is never freed.
    luaL_openlibs(L);
    REQUIRE(luaL_dostring(L, "for i = 1, 200 do _G['g' .. i] = i end collectgarbage() "
                             "local n = 0 for k, v in pairs(_G) do if type(k) == 'string' and k:match('^g%d+$') then "
                             "n = n + 1 assert(v == tonumber(k:sub(2))) end end assert(n == 200) collectgarbage()") == 0);
    lua_close(L);
    CHECK_FALSE(s.freed);
  }
  // A state whose globals hash part came from elsewhere does not pass.
  StateArena arena;
  lua_State* L = lua_newstate(lua_alloc, &arena);
  REQUIRE(L != nullptr);
  CHECK_FALSE(host::lua::small_globals::holds_globals(L, host::lua::small_globals::take_scratch()));
  lua_close(L);
}

namespace {

// How many of the pages wholly inside [p, p + n) are resident.
std::size_t resident_inner_pages(void* p, std::size_t n) {
  const auto page = static_cast<std::uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + page - 1) & ~(page - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + n) & ~(page - 1);
  if (end <= begin) return 0;
  std::vector<unsigned char> vec((end - begin) / page);
  REQUIRE(mincore(reinterpret_cast<void*>(begin), end - begin, vec.data()) == 0);
  return static_cast<std::size_t>(std::count_if(vec.begin(), vec.end(), [](unsigned char v) { return v & 1; }));
}

}  // namespace

TEST_CASE("a slab pool keeps chunks up to its cap; past it a chunk stays pooled without its inner pages") {
  constexpr std::size_t kBytes = StateArena::kFirstChunkBytes;
  ChunkPool pool(kBytes, true, 4);
  std::vector<void*> chunks;
  pool.take(chunks, 6);
  REQUIRE(chunks.size() == 6);
  // Side by side in one slab, each written through (made resident).
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    if (i > 0) CHECK(static_cast<char*>(chunks[i]) == static_cast<char*>(chunks[i - 1]) + kBytes);
    std::memset(chunks[i], static_cast<int>(0x40 + i), kBytes);
  }
  // How many whole pages each holds depends on where it starts (13.5 KB
  // is not a whole number of pages): two or three.
  std::vector<std::size_t> inner;
  for (void* c : chunks) {
    inner.push_back(resident_inner_pages(c, kBytes));
    REQUIRE(inner.back() >= 2);
  }
  std::vector<void*> given = chunks;
  pool.give(given, 6);  // the last one given first: chunks[5] .. chunks[2] fit the cap
  CHECK(given.empty());
  CHECK(pool.pooled() == 6);
  for (std::size_t i = 2; i < 6; ++i) CHECK(resident_inner_pages(chunks[i], kBytes) == inner[i]);
  for (std::size_t i = 0; i < 2; ++i) CHECK(resident_inner_pages(chunks[i], kBytes) == 0);
  // The chunks come back, every one usable, before any new slab chunk.
  std::vector<void*> again;
  pool.take(again, 6);
  std::sort(again.begin(), again.end());
  CHECK(again == chunks);
  for (void* c : again) {
    std::memset(c, 0x7f, kBytes);
    CHECK(static_cast<unsigned char*>(c)[kBytes - 1] == 0x7f);
  }
  // One more is carved after them.
  std::vector<void*> more;
  pool.take(more, 1);
  REQUIRE(more.size() == 1);
  CHECK(static_cast<char*>(more[0]) == static_cast<char*>(chunks[5]) + kBytes);
}

TEST_CASE("a malloc pool frees the chunks past its cap and makes none itself") {
  ChunkPool pool(StateArena::kChunkBytes, false, 2);
  std::vector<void*> out;
  pool.take(out, 3);
  CHECK(out.empty());
  std::vector<void*> chunks;
  for (int i = 0; i < 5; ++i) chunks.push_back(std::malloc(StateArena::kChunkBytes));
  const std::vector<void*> kept{chunks[4], chunks[3]};
  pool.give(chunks, 5);  // two kept, three freed (ASan would name a leak or a double free)
  CHECK(chunks.empty());
  CHECK(pool.pooled() == 2);
  pool.take(out, 5);
  REQUIRE(out.size() == 2);
  CHECK(((out[0] == kept[0] && out[1] == kept[1]) || (out[0] == kept[1] && out[1] == kept[0])));
  for (void* c : out) std::free(c);
}
