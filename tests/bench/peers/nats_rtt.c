/* NATS's own request/reply round trip, the floor under the host's remote
 * round trip (tests/bench/cluster.sh): `nats_rtt serve URL` answers every
 * request on "bench.echo" with its data; `nats_rtt ask URL N` makes N
 * requests of 16 bytes one after another and prints their p50 and p99 in
 * microseconds. Two programs, as the host's two nodes are; both write
 * each message at once (SendAsap), as the host's node does. */
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nats_connect.h"

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void answer(natsConnection* nc, natsSubscription* sub, natsMsg* msg, void* closure) {
  (void)sub;
  (void)closure;
  if (natsMsg_GetReply(msg))
    natsConnection_Publish(nc, natsMsg_GetReply(msg), natsMsg_GetData(msg), natsMsg_GetDataLength(msg));
  natsMsg_Destroy(msg);
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc < 3 || (strcmp(argv[1], "serve") && strcmp(argv[1], "ask"))) {
    fprintf(stderr, "usage: nats_rtt serve URL | nats_rtt ask URL N\n");
    return 2;
  }
  natsConnection* nc = connect_to("nats_rtt", argv[2]);
  if (!strcmp(argv[1], "serve")) {
    natsSubscription* sub = NULL;
    natsConnection_Subscribe(&sub, nc, "bench.echo", answer, NULL);
    natsConnection_Flush(nc);
    printf("serving\n");
    fflush(stdout);
    for (;;) pause();
  }
  int n = argc > 3 ? atoi(argv[3]) : 10000;
  if (n < 1) {
    fprintf(stderr, "nats_rtt: N must be a positive count, not %s\n", argv[3]);
    return 2;
  }
  double* rtt = malloc(sizeof(double) * n);
  const char payload[16] = "0123456789abcde";
  for (int i = 0; i < n; ++i) {
    natsMsg* reply = NULL;
    double t0 = now_us();
    natsStatus s = natsConnection_Request(&reply, nc, "bench.echo", payload, 16, 5000);
    if (s != NATS_OK) {
      fprintf(stderr, "nats_rtt: request %d: %s\n", i, natsStatus_GetText(s));
      return 1;
    }
    rtt[i] = now_us() - t0;
    natsMsg_Destroy(reply);
  }
  qsort(rtt, n, sizeof(double), cmp);
  printf("FIGURE nats_rtt p50_us %.1f\nFIGURE nats_rtt p99_us %.1f\n", rtt[n / 2], rtt[(int)(n * 0.99)]);
  natsConnection_Destroy(nc);
  return 0;
}
