/* shm_endpoint_leak_repro: libfabric alone (no rdmalib), the heap that the
 * shm provider keeps for every endpoint a process has ever opened
 * (docs/BACKEND-BUGS.md, "shm: every endpoint leaves its name on the heap").
 *
 * One domain; N times: open an address vector, a completion queue and an RDM
 * endpoint, enable it, close all three. Every so often it prints the bytes
 * malloc has handed out and not had back (mallinfo2's uordblks) and the size
 * of the main heap (arena). Nothing this program keeps grows with N, so the
 * growth per endpoint is what the provider kept. On libfabric 1.17 it is 288
 * bytes: smr_create() puts a struct smr_ep_name on a process-wide list, and
 * only the error path of smr_create() and the provider's unload take it off
 * (2.6 is the same). Each later mapping of a peer's region searches that list
 * by name.
 *
 * Usage: shm_endpoint_leak_repro [--endpoints N]   (default 1000)
 * Exit status 0 when every endpoint opened and closed, 1 on a setup error.
 */
#define _GNU_SOURCE

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int check(int ret, const char *what) {
  if (ret) {
    fprintf(stderr, "shm_endpoint_leak_repro: %s: %s (%d)\n", what, fi_strerror(-ret), ret);
    exit(1);
  }
  return 0;
}

static void report(long opened, size_t base) {
  struct mallinfo2 m = mallinfo2();
  double per = opened ? ((double)m.uordblks - (double)base) / (double)opened : 0;
  printf("%6ld endpoints opened and closed: heap in use %8zu bytes (%+.1f per endpoint), "
         "main heap %8zu bytes\n",
         opened, m.uordblks, per, m.arena);
}

int main(int argc, char **argv) {
  long n = 1000;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--endpoints") && i + 1 < argc) {
      char *end = NULL;
      n = strtol(argv[++i], &end, 10);
      if (!end || *end || n < 1) {
        fprintf(stderr, "shm_endpoint_leak_repro: --endpoints takes a positive number\n");
        return 1;
      }
    } else {
      fprintf(stderr, "usage: shm_endpoint_leak_repro [--endpoints N]\n");
      return 1;
    }
  }

  struct fi_info *hints = fi_allocinfo(), *info = NULL;
  if (!hints)
    return 1;
  hints->fabric_attr->prov_name = strdup("shm");
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_MSG;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  check(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &info), "fi_getinfo (shm)");
  printf("libfabric %u.%u, provider %s\n", FI_MAJOR(fi_version()), FI_MINOR(fi_version()),
         info->fabric_attr->prov_name);

  struct fid_fabric *fabric;
  struct fid_domain *domain;
  check(fi_fabric(info->fabric_attr, &fabric, NULL), "fi_fabric");
  check(fi_domain(fabric, info, &domain, NULL), "fi_domain");

  /* The first endpoint sets up what the provider keeps once per process. */
  size_t base = 0;
  long step = n >= 4 ? n / 4 : 1;
  for (long i = 0; i <= n; ++i) {
    struct fid_av *av;
    struct fid_cq *cq;
    struct fid_ep *ep;
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_DATA, .size = 64};
    check(fi_av_open(domain, &av_attr, &av, NULL), "fi_av_open");
    check(fi_cq_open(domain, &cq_attr, &cq, NULL), "fi_cq_open");
    check(fi_endpoint(domain, info, &ep, NULL), "fi_endpoint");
    check(fi_ep_bind(ep, &av->fid, 0), "binding the address vector");
    check(fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV), "binding the completion queue");
    check(fi_enable(ep), "fi_enable");
    check(fi_close(&ep->fid), "closing the endpoint");
    check(fi_close(&cq->fid), "closing the completion queue");
    check(fi_close(&av->fid), "closing the address vector");
    if (i == 0) {
      base = mallinfo2().uordblks;
      report(0, base);
    } else if (i % step == 0 || i == n) {
      report(i, base);
    }
  }

  fi_close(&domain->fid);
  fi_close(&fabric->fid);
  fi_freeinfo(info);
  fi_freeinfo(hints);
  return 0;
}
