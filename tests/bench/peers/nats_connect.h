/* The NATS peers' connection (nats_rtt.c, nats_mb.c): each message
 * written at once (SendAsap), as the host's node does; a peer that
 * cannot connect says so, with its name, and exits. */
#pragma once
#include <nats/nats.h>
#include <stdio.h>
#include <stdlib.h>

static natsConnection* connect_to(const char* who, const char* url) {
  natsOptions* o = NULL;
  natsConnection* nc = NULL;
  natsOptions_Create(&o);
  natsOptions_SetURL(o, url);
  natsOptions_SetSendAsap(o, true);
  natsStatus s = natsConnection_Connect(&nc, o);
  natsOptions_Destroy(o);
  if (s != NATS_OK) {
    fprintf(stderr, "%s: cannot connect to %s: %s\n", who, url, natsStatus_GetText(s));
    exit(1);
  }
  return nc;
}
