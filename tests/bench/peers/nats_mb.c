/* NATS's own rate for large payloads one way, the ceiling over the host's
 * 1 MB row (tests/bench/cluster.sh): `nats_mb sink URL` answers every
 * message on "bench.mb" with its length; `nats_mb send URL N [SIZE]`
 * publishes N payloads of SIZE bytes (1 MB unless given; nats-server's
 * default limit on one message is 1 MB; cluster.sh gives 256 KB, at which
 * the pair moved the most bytes per second) with at most 8 MB unanswered, as
 * the host's bench:mb keeps 8 messages of 1 MB in flight, and prints the
 * rate in MB/s. Two programs through one server, as the host's two nodes
 * are; both write each message at once (SendAsap), as the host's node
 * does; cluster.sh links it with mimalloc where it can, as the host is.
 * Nothing of the host's session (sequence numbers, acks, resends,
 * reassembly, Lua strings) is paid here: only the client and the server. */
#include <nats/nats.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nats_connect.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static long answered = 0;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void answer(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* closure) {
  (void)sub;
  (void)closure;
  char len[24];
  snprintf(len, sizeof len, "%d", natsMsg_GetDataLength(msg));
  if (natsMsg_GetReply(msg)) natsConnection_PublishString(nc, natsMsg_GetReply(msg), len);
  natsMsg_Destroy(msg);
}

/* Until more than `count` answers came; exits after 60 s without one (a
 * lost message: nothing here resends). */
static void wait_answers(long count) {
  pthread_mutex_lock(&mu);
  while (answered <= count) {
    long before = answered;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 60;
    pthread_cond_timedwait(&cv, &mu, &until);
    if (answered == before && answered <= count) {
      fprintf(stderr, "nats_mb: no answer for 60 s (%ld answered)\n", answered);
      exit(1);
    }
  }
  pthread_mutex_unlock(&mu);
}

static void answered_one(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* closure) {
  (void)nc;
  (void)sub;
  (void)closure;
  natsMsg_Destroy(msg);
  pthread_mutex_lock(&mu);
  ++answered;
  pthread_cond_signal(&cv);
  pthread_mutex_unlock(&mu);
}

int main(int argc, char** argv) {
  if (argc < 3 || (strcmp(argv[1], "sink") && strcmp(argv[1], "send"))) {
    fprintf(stderr, "usage: nats_mb sink URL | nats_mb send URL N [SIZE]\n");
    return 2;
  }
  natsConnection* nc = connect_to("nats_mb", argv[2]);
  natsSubscription* sub = NULL;
  if (!strcmp(argv[1], "sink")) {
    natsConnection_Subscribe(&sub, nc, "bench.mb", answer, NULL);
    /* A slow consumer's drop would stall the sender (nothing resends). */
    natsSubscription_SetPendingLimits(sub, -1, -1);
    natsConnection_Flush(nc);
    printf("serving\n");
    fflush(stdout);
    for (;;) pause();
  }
  long n = argc > 3 ? atol(argv[3]) : 200;
  long size = argc > 4 ? atol(argv[4]) : 1048576;
  if (n < 1 || size < 1) {
    fprintf(stderr, "nats_mb: N and SIZE must be positive counts\n");
    return 2;
  }
  long in_flight = (8L << 20) / size;
  if (in_flight < 1) in_flight = 1;
  char inbox[64];
  snprintf(inbox, sizeof inbox, "bench.mb.answers.%d", (int)getpid());
  natsConnection_Subscribe(&sub, nc, inbox, answered_one, NULL);
  natsConnection_Flush(nc);
  char* payload = malloc(size);
  memset(payload, 'z', size);
  double t0 = now_s();
  for (long sent = 0; sent < n; ++sent) {
    wait_answers(sent - in_flight);
    natsStatus s = natsConnection_PublishRequest(nc, "bench.mb", inbox, payload, (int)size);
    if (s != NATS_OK) {
      fprintf(stderr, "nats_mb: publish %ld: %s\n", sent, natsStatus_GetText(s));
      return 1;
    }
  }
  wait_answers(n - 1);
  double t = now_s() - t0;
  printf("FIGURE nats_mb mb_per_s %.1f\n", (double)n * size / 1048576.0 / t);
  natsSubscription_Destroy(sub);
  natsConnection_Destroy(nc);
  free(payload);
  return 0;
}
