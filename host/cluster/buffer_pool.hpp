// Large message buffers kept for reuse: a few strings of 256 KB or more,
// given back when the message they carried is acknowledged and handed out
// again for the next large message. Threads: any; one mutex of its own.
//
// Why: a 1 MB message's buffer was fresh memory each time (allocated on the
// sending worker, freed on a NATS thread when acknowledged, so the
// allocator did not hand the same pages back), and its first write took a
// page fault per 4 KB: half the time of the sender's largest copy. A kept
// buffer's pages stay mapped.
//
// The receiving side too: a large message's parts are put together into a
// kept buffer (wire.hpp's Reassembly), which becomes the delivered event's
// payload; the process gives it back once it has decoded it (LuaProcess::
// push_payload). A fresh 1 MB there cost the same page faults, and was
// freed on the worker, far from the NATS thread that took the next one.
//
// Bound: at most kPoolBytes in all (the largest buffers a node keeps are
// its messages' size); a buffer that would pass it is freed as before.
// A program that never took a large buffer keeps none: the process's
// give_back of a large local message's payload frees it (a host that is
// no node would otherwise hold 16 MB of its messages' buffers for nobody).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace host::cluster {

// Buffers below this are left to malloc (its own caches serve them well).
inline constexpr std::size_t kPooledMinBytes = 256u << 10;
inline constexpr std::size_t kPoolBytes = 16u << 20;

// A string holding `head` with room for `capacity` bytes in all: a kept
// buffer when one is large enough, else a fresh one.
std::string take_buffer(std::string_view head, std::size_t capacity);
// Keeps `buf` (its bytes dropped) when large and within the bound, and
// once some large buffer was taken; else leaves it as it is.
void give_back(std::string&& buf);
// An envelope's bytes (wire.hpp's EnvelopeBuffer) whose buffer is given
// back when its last body is done with it.
std::shared_ptr<std::string> share_buffer(std::string&& bytes);
// Buffers kept now (tests).
std::size_t pooled_buffers();

}  // namespace host::cluster
