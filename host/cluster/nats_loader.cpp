// libnats opened with dlopen at a --cluster start (nats_loader.hpp says
// why). nats_node.cpp calls the natsXxx functions as if linked: this file
// defines each of them as a forwarder to the function resolved in the
// opened library, so the node's code and its libnats calls stay as they
// are. The forwarders are the executable's own symbols; it exports none
// of them (no library it links refers to them), so libnats's calls among
// its own functions never land here.
#include "host/cluster/nats_loader.hpp"

#include <dlfcn.h>

#include <cstdlib>

#include <nats/nats.h>

// From CMakeLists.txt: the soname of the libnats the host was built
// against, its version, and the Debian/Ubuntu package that holds it.
#if !defined(HOST_NATS_SONAME) || !defined(HOST_NATS_VERSION) || !defined(HOST_NATS_PACKAGE)
#error "HOST_NATS_SONAME, HOST_NATS_VERSION and HOST_NATS_PACKAGE come from CMakeLists.txt"
#endif

namespace host::cluster {
namespace {

// Every libnats function nats_node.cpp calls; a forwarder below for each.
#define HOST_NATS_FUNCTIONS(X)          \
  X(natsConnection_Close)               \
  X(natsConnection_Connect)             \
  X(natsConnection_Destroy)             \
  X(natsConnection_FlushTimeout)        \
  X(natsConnection_Publish)             \
  X(natsConnection_PublishString)       \
  X(natsConnection_Request)             \
  X(natsConnection_Status)              \
  X(natsConnection_Subscribe)           \
  X(natsMsg_Destroy)                    \
  X(natsMsg_GetData)                    \
  X(natsMsg_GetDataLength)              \
  X(natsMsg_GetReply)                   \
  X(natsOptions_Create)                 \
  X(natsOptions_Destroy)                \
  X(natsOptions_SetMaxReconnect)        \
  X(natsOptions_SetName)                \
  X(natsOptions_SetReconnectBufSize)    \
  X(natsOptions_SetReconnectWait)       \
  X(natsOptions_SetSendAsap)            \
  X(natsOptions_SetTimeout)             \
  X(natsOptions_SetURL)                 \
  X(natsStatus_GetText)                 \
  X(natsSubscription_Destroy)           \
  X(natsSubscription_SetPendingLimits)  \
  X(natsSubscription_Unsubscribe)

// Typed from nats.h's declarations, so a forwarder and its target cannot
// disagree on a signature.
struct Functions {
#define HOST_NATS_POINTER(name) decltype(&::name) name = nullptr;
  HOST_NATS_FUNCTIONS(HOST_NATS_POINTER)
#undef HOST_NATS_POINTER
};

// Written once, by open_nats on the main thread before any node exists
// (and so before any NATS thread); read-only from then on.
Functions nats;

constexpr const char* k_install =
    "install the distribution's libnats (Debian and Ubuntu: " HOST_NATS_PACKAGE
    ", which libnats-dev brings; this host was built against libnats " HOST_NATS_VERSION ")";

std::string open_nats() {
  const char* chosen = std::getenv("HOST_NATS_LIBRARY");
  const bool from_env = chosen && *chosen;
  const std::string library = from_env ? chosen : HOST_NATS_SONAME;
  const std::string named = from_env ? "HOST_NATS_LIBRARY=" + library : library;
  // RTLD_NOW: a libnats whose own dependencies are missing fails here,
  // with the dynamic linker's words, not at its first call. Never closed:
  // its threads run until the host exits.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* why = dlerror();
    return "--cluster: cannot load libnats (" + named + "): " + (why ? why : "unknown error") + "; " + k_install;
  }
  Functions found;
#define HOST_NATS_RESOLVE(name)                                                                          \
  found.name = reinterpret_cast<decltype(found.name)>(dlsym(handle, #name));                             \
  if (!found.name) {                                                                                     \
    dlclose(handle);                                                                                     \
    return "--cluster: libnats (" + named + ") has no function " #name ", which the cluster calls; " +   \
           k_install;                                                                                    \
  }
  HOST_NATS_FUNCTIONS(HOST_NATS_RESOLVE)
#undef HOST_NATS_RESOLVE
  nats = found;
  return "";
}

}  // namespace

std::string load_nats() {
  static const std::string error = open_nats();
  return error;
}

}  // namespace host::cluster

// The forwarders: nats.h's functions, defined here (nats.h declares them
// extern "C", so a mismatched parameter list does not compile).
using host::cluster::nats;

extern "C" {

void natsConnection_Close(natsConnection* nc) { nats.natsConnection_Close(nc); }
natsStatus natsConnection_Connect(natsConnection** nc, natsOptions* options) {
  return nats.natsConnection_Connect(nc, options);
}
void natsConnection_Destroy(natsConnection* nc) { nats.natsConnection_Destroy(nc); }
natsStatus natsConnection_FlushTimeout(natsConnection* nc, int64_t timeout) {
  return nats.natsConnection_FlushTimeout(nc, timeout);
}
natsStatus natsConnection_Publish(natsConnection* nc, const char* subj, const void* data, int dataLen) {
  return nats.natsConnection_Publish(nc, subj, data, dataLen);
}
natsStatus natsConnection_PublishString(natsConnection* nc, const char* subj, const char* str) {
  return nats.natsConnection_PublishString(nc, subj, str);
}
natsStatus natsConnection_Request(natsMsg** replyMsg, natsConnection* nc, const char* subj, const void* data,
                                  int dataLen, int64_t timeout) {
  return nats.natsConnection_Request(replyMsg, nc, subj, data, dataLen, timeout);
}
natsConnStatus natsConnection_Status(natsConnection* nc) { return nats.natsConnection_Status(nc); }
natsStatus natsConnection_Subscribe(natsSubscription** sub, natsConnection* nc, const char* subject,
                                    natsMsgHandler cb, void* cbClosure) {
  return nats.natsConnection_Subscribe(sub, nc, subject, cb, cbClosure);
}
void natsMsg_Destroy(natsMsg* msg) { nats.natsMsg_Destroy(msg); }
const char* natsMsg_GetData(const natsMsg* msg) { return nats.natsMsg_GetData(msg); }
int natsMsg_GetDataLength(const natsMsg* msg) { return nats.natsMsg_GetDataLength(msg); }
const char* natsMsg_GetReply(const natsMsg* msg) { return nats.natsMsg_GetReply(msg); }
natsStatus natsOptions_Create(natsOptions** newOpts) { return nats.natsOptions_Create(newOpts); }
void natsOptions_Destroy(natsOptions* opts) { nats.natsOptions_Destroy(opts); }
natsStatus natsOptions_SetMaxReconnect(natsOptions* opts, int maxReconnect) {
  return nats.natsOptions_SetMaxReconnect(opts, maxReconnect);
}
natsStatus natsOptions_SetName(natsOptions* opts, const char* name) { return nats.natsOptions_SetName(opts, name); }
natsStatus natsOptions_SetReconnectBufSize(natsOptions* opts, int reconnectBufSize) {
  return nats.natsOptions_SetReconnectBufSize(opts, reconnectBufSize);
}
natsStatus natsOptions_SetReconnectWait(natsOptions* opts, int64_t reconnectWait) {
  return nats.natsOptions_SetReconnectWait(opts, reconnectWait);
}
natsStatus natsOptions_SetSendAsap(natsOptions* opts, bool sendAsap) {
  return nats.natsOptions_SetSendAsap(opts, sendAsap);
}
natsStatus natsOptions_SetTimeout(natsOptions* opts, int64_t timeout) {
  return nats.natsOptions_SetTimeout(opts, timeout);
}
natsStatus natsOptions_SetURL(natsOptions* opts, const char* url) { return nats.natsOptions_SetURL(opts, url); }
const char* natsStatus_GetText(natsStatus s) { return nats.natsStatus_GetText(s); }
void natsSubscription_Destroy(natsSubscription* sub) { nats.natsSubscription_Destroy(sub); }
natsStatus natsSubscription_SetPendingLimits(natsSubscription* sub, int msgLimit, int bytesLimit) {
  return nats.natsSubscription_SetPendingLimits(sub, msgLimit, bytesLimit);
}
natsStatus natsSubscription_Unsubscribe(natsSubscription* sub) { return nats.natsSubscription_Unsubscribe(sub); }

}  // extern "C"
