/* rxm_close_repro: libfabric alone (no rdmalib), the use-after-free in RxM's
 * endpoint close that crashed the conformance suite on verbs;ofi_rxm over rxe
 * (docs/BACKEND-BUGS.md).
 *
 * Two RDM endpoints of one process, A and B, on the same device. A sends B
 * one message that B receives (the connection is up), then `--unexpected`
 * more that B has posted no receive for, and waits for their send
 * completions: on a verbs RC queue pair they arrived in B's completion queue.
 * B then closes its endpoint without reading its queue again. RxM's
 * rxm_close_conn() closes the connection's verbs endpoint first and then
 * reads the verbs completion queue (rxm_flush_msg_cq); each of those
 * messages is unexpected, so RxM posts a new receive buffer in its place
 * (rxm_replace_rx_buf) on the verbs endpoint it has just freed. Run with
 * MALLOC_PERTURB_ set (the freed endpoint is overwritten) it crashes at once;
 * without, it corrupts the heap or crashes later. A hardware provider such as
 * mlx5 removes a destroyed queue pair's entries from its completion queue,
 * so the flush finds nothing; rxe leaves them there.
 *
 * With FI_OFI_RXM_USE_SRX=1, RxM posts its receive buffers on a shared receive
 * context that outlives the connections, and the same sequence closes cleanly.
 *
 * Usage: rxm_close_repro [--ip ADDR] [--provider NAME] [--unexpected N]
 *                        [--rounds R]
 * ADDR defaults to $SOFTROCE_IP, else 10.99.0.1; NAME to "verbs;ofi_rxm".
 * Exit status 0 when every round closed, 1 on a setup error (the process
 * dies of the signal when the bug strikes). Built on the libfabric backend
 * only; run it in the soft-RoCE VM (tests/softroce/README.md).
 */
#define _POSIX_C_SOURCE 200809L

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                                                \
  do {                                                                                             \
    int ret_ = (int)(call);                                                                        \
    if (ret_) {                                                                                    \
      fprintf(stderr, "rxm_close_repro: %s failed: %s (%d)\n", #call, fi_strerror(-ret_), ret_);   \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

struct side {
  struct fid_cq *cq;
  struct fid_av *av;
  struct fid_ep *ep;
  char name[256];
  size_t name_len;
};

static void open_side(struct fid_domain *domain, struct fi_info *info, struct side *s) {
  struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_DATA, .size = 64};
  struct fi_av_attr av_attr = {.type = FI_AV_TABLE, .count = 4};
  CHECK(fi_cq_open(domain, &cq_attr, &s->cq, NULL));
  CHECK(fi_av_open(domain, &av_attr, &s->av, NULL));
  CHECK(fi_endpoint(domain, info, &s->ep, NULL));
  CHECK(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV));
  CHECK(fi_ep_bind(s->ep, &s->av->fid, 0));
  CHECK(fi_enable(s->ep));
  s->name_len = sizeof s->name;
  CHECK(fi_getname(&s->ep->fid, s->name, &s->name_len));
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Read `want` completions from `cq`, driving `also` too (both endpoints live
 * in this thread, and RxM progresses manually); exit after 10 s. */
static void wait_completions(struct side *s, struct side *also, int want) {
  double end = now() + 10;
  while (want > 0) {
    struct fi_cq_data_entry e;
    ssize_t n = fi_cq_read(s->cq, &e, 1);
    if (n == 1) {
      --want;
    } else if (n == -FI_EAVAIL) {
      struct fi_cq_err_entry ee = {0};
      fi_cq_readerr(s->cq, &ee, 0);
      fprintf(stderr, "rxm_close_repro: completion error %s\n", fi_strerror(ee.err));
      exit(1);
    } else if (n != -FI_EAGAIN) {
      fprintf(stderr, "rxm_close_repro: fi_cq_read: %s\n", fi_strerror((int)-n));
      exit(1);
    }
    if (also)
      fi_cq_read(also->cq, NULL, 0);
    if (now() > end) {
      fprintf(stderr, "rxm_close_repro: no completion within 10 s\n");
      exit(1);
    }
  }
}

/* RxM connects on the first send (-FI_EAGAIN until the peer, progressed
 * here too, accepted). */
static void post_send(struct side *from, struct side *peer, fi_addr_t to, void *buf, size_t len,
                      void *desc, struct fi_context2 *ctx) {
  ssize_t r;
  double end = now() + 10;
  while ((r = fi_send(from->ep, buf, len, desc, to, ctx)) == -FI_EAGAIN && now() < end) {
    fi_cq_read(from->cq, NULL, 0);
    fi_cq_read(peer->cq, NULL, 0);
  }
  CHECK(r);
}

int main(int argc, char **argv) {
  const char *ip = getenv("SOFTROCE_IP") ? getenv("SOFTROCE_IP") : "10.99.0.1";
  const char *prov = "verbs;ofi_rxm";
  int unexpected = 4, rounds = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--ip"))
      ip = argv[i + 1];
    else if (!strcmp(argv[i], "--provider"))
      prov = argv[i + 1];
    else if (!strcmp(argv[i], "--unexpected"))
      unexpected = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--rounds"))
      rounds = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "usage: %s [--ip ADDR] [--provider NAME] [--unexpected N] [--rounds R]\n",
              argv[0]);
      return 1;
    }
  }
  if (unexpected < 0 || unexpected > 32 || rounds < 1) {
    fprintf(stderr, "rxm_close_repro: --unexpected 0..32, --rounds >= 1\n");
    return 1;
  }

  /* RxM sizes its verbs completion queue as rx_size x FI_UNIVERSE_SIZE (256):
   * beyond rxe's max_cqe (docs/BACKEND-BUGS.md). */
  setenv("FI_UNIVERSE_SIZE", "32", 0);
  struct fi_info *hints = fi_allocinfo(), *info = NULL;
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->fabric_attr->prov_name = strdup(prov);
  CHECK(fi_getinfo(FI_VERSION(1, 9), ip, NULL, FI_SOURCE, hints, &info));
  printf("rxm_close_repro: libfabric %u.%u, %s on %s (%s), %d unexpected messages, %d rounds\n",
         FI_MAJOR(fi_version()), FI_MINOR(fi_version()), info->fabric_attr->prov_name,
         info->domain_attr->name, ip, unexpected, rounds);
  const char *srx = getenv("FI_OFI_RXM_USE_SRX");
  printf("rxm_close_repro: FI_OFI_RXM_USE_SRX=%s\n", srx ? srx : "(unset)");
  fflush(stdout);

  struct fid_fabric *fabric;
  struct fid_domain *domain;
  CHECK(fi_fabric(info->fabric_attr, &fabric, NULL));
  CHECK(fi_domain(fabric, info, &domain, NULL));

  static char buf[2][64];
  struct fid_mr *mr;
  CHECK(fi_mr_reg(domain, buf, sizeof buf, FI_SEND | FI_RECV, 0, 0, 0, &mr, NULL));
  void *desc = fi_mr_desc(mr);
  struct fi_context2 ctx[40];

  for (int round = 0; round < rounds; ++round) {
    struct side a, b;
    open_side(domain, info, &a);
    open_side(domain, info, &b);
    fi_addr_t b_at;
    if (fi_av_insert(a.av, b.name, 1, &b_at, 0, NULL) != 1) {
      fprintf(stderr, "rxm_close_repro: fi_av_insert failed\n");
      return 1;
    }
    /* One message B receives: the connection is up on both sides. */
    CHECK(fi_recv(b.ep, buf[1], sizeof buf[1], desc, FI_ADDR_UNSPEC, &ctx[0]));
    snprintf(buf[0], sizeof buf[0], "hello %d", round);
    post_send(&a, &b, b_at, buf[0], sizeof buf[0], desc, &ctx[1]);
    wait_completions(&a, &b, 1);
    wait_completions(&b, &a, 1);
    /* Messages B has no receive for. Their send completions mean they
     * reached B's verbs completion queue (RC: the responder completes the
     * receive before it acknowledges). B does not read its queue again. */
    for (int i = 0; i < unexpected; ++i)
      post_send(&a, &a, b_at, buf[0], sizeof buf[0], desc, &ctx[2 + i]);
    wait_completions(&a, NULL, unexpected);
    /* B closes with the messages unread: the crash, when it comes, is here. */
    CHECK(fi_close(&b.ep->fid));
    CHECK(fi_close(&a.ep->fid));
    CHECK(fi_close(&a.av->fid));
    CHECK(fi_close(&b.av->fid));
    CHECK(fi_close(&a.cq->fid));
    CHECK(fi_close(&b.cq->fid));
    printf("rxm_close_repro: round %d closed\n", round + 1);
    fflush(stdout);
  }
  CHECK(fi_close(&mr->fid));
  CHECK(fi_close(&domain->fid));
  CHECK(fi_close(&fabric->fid));
  fi_freeinfo(info);
  fi_freeinfo(hints);
  printf("rxm_close_repro: all %d rounds closed without a crash\n", rounds);
  return 0;
}
