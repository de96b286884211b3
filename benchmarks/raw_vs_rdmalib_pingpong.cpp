// raw_vs_rdmalib_pingpong: the raw libfabric ping-pong and the rdmalib one in
// the same two processes, alternating in short blocks, so that the ratio
// rdmalib / raw is measured on the same machine state.
//
// Why: run-pingpong.sh runs raw_libfabric_pingpong and rdmalib_pingpong one
// after the other, and on a shared VM the round trip changes level from one
// run to the next (shm 8 B: ~0.55 us in one run, ~1.6 us in the next), so
// the ratio of two separate runs scatters (0.87-1.28 for short runs). Here
// each process (server and client) opens both a RawEndpoint
// (raw_libfabric_endpoint.hpp) and an rdmalib Side (rdmalib_side.hpp) and
// connects both over the same out-of-band channel; then, per (mode, size),
// --rounds rounds each run one block on raw and one on rdmalib, raw first in
// even rounds and rdmalib first in odd ones (so that an order effect, such as
// the first block after a barrier paying for a wake-up, cancels). A block is -w
// unmeasured round trips, then -n measured ones.
//
// The round trip is exactly the one of the two programs (see their headers):
// the client stamps, writes the marker byte into its send buffer, posts a send
// or a write-with-immediate, waits for the reply, reposts the receive it
// consumed, reaps its own transmit completion and stamps; the server mirrors
// it; the same checks of every completion and of the first reply's bytes. The
// client marks a block's last ping with kLastMarker in its first payload
// byte, and the two sides meet at a barrier (increasing tags) before and after
// every block, outside the timed region. Both sides derive which
// implementation runs a block from the round number.
//
// --endpoints K opens K connections of each implementation and runs round r
// on the (r mod K)-th of each. On shm a pair of endpoints carries an offset
// of its own for the whole run (where its shared-memory regions, queues and
// buffers land: raw against a second raw endpoint gives 0.94-1.10 from run
// to run), so the ratio of one run with one endpoint each is partly the
// ratio of two placements; K of each average that out within the run.
//
// The rdmalib fabric is opened before the raw endpoint: rdmalib sets its
// provider environment defaults (FI_OFI_RXM_*, provider_table.cpp) before
// libfabric first initialises, as it does in rdmalib_pingpong, and the raw
// endpoint then runs under the same environment.
//
// Includes libfabric headers (through raw_libfabric_endpoint.hpp), which
// DESIGN.md §2 allows outside rdmalib/ only in raw baselines: its name says "raw".
#include <memory>
#include <vector>

#include <rdmalib/rdmalib.hpp>

#include <spdlog/spdlog.h>

#include "pingpong_common.hpp"
#include "raw_libfabric_endpoint.hpp"
#include "rdmalib_side.hpp"
#include "stats.hpp"

namespace {

using namespace pingpong;

/// --rounds: rounds per (mode, size), each one block of each implementation.
size_t g_rounds = 40;
/// --self-check: the rdmalib blocks run on a second raw endpoint instead, so
/// every ratio compares raw with raw and shows what the method itself adds
/// (1.000 when blocks, order and placement favour neither side).
bool g_self_check = false;
/// --endpoints: connections of each implementation; round r runs on the
/// (r mod K)-th of each (see the top).
size_t g_endpoints = 1;

enum class Impl { Raw, Rdmalib };

/// Which implementation runs block `b` (0 = first, 1 = second) of `round`:
/// raw first in even rounds, rdmalib first in odd ones.
Impl impl_of(size_t round, int b) {
  bool raw_first = round % 2 == 0;
  return (b == 0) == raw_first ? Impl::Raw : Impl::Rdmalib;
}

/// Measured round trips per block: -n, else 1000 up to 1 KiB, 200 up to
/// 64 KiB, 30 above (a tenth of the separate programs' counts).
size_t block_iterations(const Options &o, size_t size) {
  if (o.iters)
    return o.iters;
  if (size <= 1024)
    return 1000;
  if (size <= 64 * 1024)
    return 200;
  return 30;
}

/// Unmeasured round trips before each block: -w, else a tenth of the block, at least 10.
size_t block_warmup(const Options &o, size_t size) {
  return o.warmup ? o.warmup : std::max<size_t>(block_iterations(o, size) / 10, 10);
}

/// One block's schedule; --budget ends a block early (a safety valve: blocks
/// take milliseconds).
Schedule block_schedule(const Options &o, size_t size) {
  Schedule s;
  s.warm = block_warmup(o, size);
  s.iters = block_iterations(o, size);
  s.min_measured = std::min<size_t>(s.iters, 500);
  s.budget = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.budget_s));
  return s;
}

// The round-trip loops are pingpong_loop.hpp's serve_block and ping_block,
// the loops of raw_libfabric_pingpong and rdmalib_pingpong: the same calls,
// over each implementation's post and post_echo (found by argument-dependent
// lookup in namespaces raw and rdside).

// ---- setup ----------------------------------------------------------------------------

/// Both implementations of one side, --endpoints connections of each,
/// connected: rdmalib first (see the top).
struct Both {
  std::vector<std::unique_ptr<rdside::Side>> lib;
  std::vector<std::unique_ptr<raw::RawEndpoint>> raw;
  /// --self-check: what runs in rdmalib's place.
  std::vector<std::unique_ptr<raw::RawEndpoint>> raw2;
  Both(const Options &o, bool server) {
    for (size_t i = 0; i < g_endpoints; ++i)
      lib.push_back(std::make_unique<rdside::Side>(o, server));
    for (size_t i = 0; i < g_endpoints; ++i)
      raw.push_back(std::make_unique<raw::RawEndpoint>(o, server));
    if (g_self_check)
      for (size_t i = 0; i < g_endpoints; ++i)
        raw2.push_back(std::make_unique<raw::RawEndpoint>(o, server));
  }
  void establish(Oob &oob, bool server) {
    for (auto &l : lib) {
      if (server)
        l->establish_server(oob);
      else
        l->establish_client(oob);
    }
    for (auto &r : raw)
      r->establish(oob);
    for (auto &r : raw2)
      r->establish(oob);
  }
  rdside::Side &lib_of(size_t round) { return *lib[round % lib.size()]; }
  raw::RawEndpoint &raw_of(size_t round) { return *raw[round % raw.size()]; }
  raw::RawEndpoint &raw2_of(size_t round) { return *raw2[round % raw2.size()]; }
  void close() {
    for (auto &l : lib)
      l->close();
  }
};

void server(const Options &o, Oob &oob) {
  Both b(o, true);
  b.establish(oob, true);
  uint32_t tag = 0;
  for (Mode mode : o.modes) {
    for (size_t size : o.sizes) {
      for (size_t round = 0; round < g_rounds; ++round) {
        for (int k = 0; k < 2; ++k) {
          if (impl_of(round, k) == Impl::Raw)
            serve_block(b.raw_of(round), mode, size, oob, tag, g_reply);
          else if (!b.raw2.empty())
            serve_block(b.raw2_of(round), mode, size, oob, tag, g_reply);
          else
            serve_block(b.lib_of(round), mode, size, oob, tag, g_reply);
        }
      }
    }
  }
  oob.barrier(~0u, "the client to finish");
  b.close();
}

// ---- results --------------------------------------------------------------------------

struct Comparison {
  Mode mode;
  size_t size;
  size_t block, warm;
  Row raw, lib;                         // over every measured round trip of all blocks
  std::vector<double> round_ratios;     // per round: rdmalib block median / raw block median
  std::vector<double> round_iqm_ratios; // per round: the same of the interquartile means
  // Per round: rdmalib's block interquartile mean minus raw's, in ns. What
  // rdmalib adds per round trip in absolute terms, which carries over to a
  // fabric whose round trip is longer (a ratio does not).
  std::vector<double> round_iqm_extra_ns;
  double ratio_of_medians = 0;
  double round_median = 0, round_min = 0, round_max = 0;
  double round_iqm_median = 0; // median over rounds of round_iqm_ratios
  double round_extra_ns = 0;   // median over rounds of round_iqm_extra_ns
};

namespace st = bench_stats;

/// "x" when both implementations agree, else "raw:x/rdmalib:y".
std::string both_or_each(const std::string &raw, const std::string &lib) {
  return raw == lib ? raw : "raw:" + raw + "/rdmalib:" + lib;
}

struct Setup {
  std::string provider, endpoint, wait; // both_or_each of the two
  std::string raw_provider, raw_endpoint, raw_wait, raw_detail;
  std::string lib_provider, lib_endpoint, lib_wait, lib_detail;
};

void print_header(const Options &o, const Setup &s) {
  if (!o.quiet) {
    std::printf(
        "# %s provider=%s endpoint=%s wait=%s pin=%s rounds=%zu endpoints=%zu reply=%s raw: "
        "libfabric=%s; %s\n",
        o.program.c_str(), s.provider.c_str(), s.endpoint.c_str(), s.wait.c_str(),
        o.pin ? (std::to_string(o.server_core) + "," + std::to_string(o.client_core)).c_str()
              : "no",
        g_rounds, g_endpoints, reply_name(g_reply), s.raw_detail.c_str(), s.lib_detail.c_str());
    std::printf("# per (mode,size): raw and rdmalib median and p99 over all blocks (us); "
                "lib/raw = ratio of those medians;\n# rnd_med, rnd_min, rnd_max = median, min, "
                "max over rounds of (rdmalib block median / raw block median);\n# rnd_iqm = "
                "median over rounds of (rdmalib / raw block interquartile mean: not bound to "
                "the clock's steps);\n# +ns = median over rounds of (rdmalib - raw block "
                "interquartile mean), in ns per round trip\n");
    if (g_self_check)
      std::printf("# --self-check: the rdmalib blocks ran on a second raw endpoint; every "
                  "\"lib\" column is raw\n");
  }
  std::printf("%-9s %9s %6s %6s %9s %9s %9s %9s %7s %7s %7s %7s %7s %7s\n", "mode", "size",
              "rounds", "block", "raw_med", "raw_p99", "lib_med", "lib_p99", "lib/raw", "rnd_med",
              "rnd_min", "rnd_max", "rnd_iqm", "+ns");
  std::fflush(stdout);
}

void print_row(const Comparison &c) {
  std::printf("%-9s %9zu %6zu %6zu %9.2f %9.2f %9.2f %9.2f %7.3f %7.3f %7.3f %7.3f %7.3f %7.1f\n",
              mode_name(c.mode), c.size, c.round_ratios.size(), c.block, c.raw.median_us,
              c.raw.p99_us, c.lib.median_us, c.lib.p99_us, c.ratio_of_medians, c.round_median,
              c.round_min, c.round_max, c.round_iqm_median, c.round_extra_ns);
  std::fflush(stdout);
}

void write_csv(const Options &o, const Setup &s, const std::vector<Comparison> &rows) {
  if (o.csv.empty())
    return;
  std::ofstream out = open_csv(
      o, "provider,endpoint,wait,mode,size,rounds,block,warmup,raw_iters,rdmalib_iters,"
         "raw_median_us,raw_p99_us,rdmalib_median_us,rdmalib_p99_us,ratio_of_medians,"
         "round_ratio_median,round_ratio_min,round_ratio_max,round_iqm_ratio_median,endpoints,"
         "round_iqm_extra_ns_median\n");
  char line[768];
  for (const Comparison &c : rows) {
    std::snprintf(line, sizeof line,
                  "\"%s\",%s,%s,%s,%zu,%zu,%zu,%zu,%zu,%zu,%.3f,%.3f,%.3f,%.3f,%.4f,%.4f,%.4f,"
                  "%.4f,%.4f,%zu,%.2f\n",
                  s.provider.c_str(), s.endpoint.c_str(), s.wait.c_str(), mode_name(c.mode), c.size,
                  c.round_ratios.size(), c.block, c.warm, c.raw.iters, c.lib.iters, c.raw.median_us,
                  c.raw.p99_us, c.lib.median_us, c.lib.p99_us, c.ratio_of_medians, c.round_median,
                  c.round_min, c.round_max, c.round_iqm_median, g_endpoints, c.round_extra_ns);
    out << line;
  }
  if (!out)
    die("writing %s failed", o.csv.c_str());
}

/// The run as JSON: metadata (backend = rdmalib's), parameters with both
/// setups, per (mode, size) one latency result per implementation (with its
/// CDF, as the separate programs write) and one "ratio" result.
void write_json(const Options &o, const Setup &s, const std::vector<Comparison> &rows) {
  if (o.json.empty())
    return;
  bench_json::Value doc =
      bench_json::document({o.program, rdmalib::Fabric::backend_name(),
                            rdmalib::Fabric::backend_version(), s.provider, s.endpoint, o.argv});
  bench_json::Value &p = doc["parameters"];
  p["impl"] = "raw_vs_rdmalib";
  p["reply"] = reply_name(g_reply);
  p["wait"] = s.wait;
  p["raw_provider"] = s.raw_provider;
  p["raw_endpoint"] = s.raw_endpoint;
  p["raw_wait"] = s.raw_wait;
  p["raw_libfabric_version"] = raw::libfabric_version();
  p["rdmalib_provider"] = s.lib_provider;
  p["rdmalib_endpoint"] = s.lib_endpoint;
  p["rdmalib_wait"] = s.lib_wait;
  p["rdmalib_describe"] = s.lib_detail;
  p["host_address"] = o.host;
  p["pinned"] = o.pin;
  p["server_core"] = o.server_core;
  p["client_core"] = o.client_core;
  p["rounds"] = g_rounds;
  p["endpoints"] = g_endpoints;
  p["self_check"] = g_self_check;
  p["block"] = o.iters; // 0 = per-size default (the results say what ran)
  p["warmup"] = o.warmup;
  p["budget_s"] = o.budget_s;
  bench_json::Value &results = doc["results"];
  for (const Comparison &c : rows) {
    for (const Row *r : {&c.raw, &c.lib}) {
      bench_json::Value v = bench_json::Value::object();
      v["kind"] = "latency";
      v["impl"] = r == &c.raw ? "raw" : "rdmalib";
      v["mode"] = mode_name(c.mode);
      v["size"] = c.size;
      v["iters"] = r->iters;
      v["median_us"] = r->median_us;
      v["p99_us"] = r->p99_us;
      v["min_us"] = r->min_us;
      v["mean_us"] = r->mean_us;
      v["cdf"] = r->cdf;
      results.push(std::move(v));
    }
    bench_json::Value v = bench_json::Value::object();
    v["kind"] = "ratio";
    v["impl"] = "rdmalib/raw";
    v["mode"] = mode_name(c.mode);
    v["size"] = c.size;
    v["rounds"] = c.round_ratios.size();
    v["block"] = c.block;
    v["warmup"] = c.warm;
    v["ratio_of_medians"] = c.ratio_of_medians;
    v["round_ratio_median"] = c.round_median;
    v["round_ratio_min"] = c.round_min;
    v["round_ratio_max"] = c.round_max;
    v["round_ratios"] = c.round_ratios;
    v["round_iqm_ratio_median"] = c.round_iqm_median;
    v["round_iqm_ratios"] = c.round_iqm_ratios;
    v["round_iqm_extra_ns_median"] = c.round_extra_ns;
    v["round_iqm_extra_ns"] = c.round_iqm_extra_ns;
    results.push(std::move(v));
  }
  try {
    bench_json::write(o.json, doc);
  } catch (const std::exception &e) {
    die("%s", e.what());
  }
}

void client(const Options &o, Oob &oob) {
  Both b(o, false);
  b.establish(oob, false);
  Setup s;
  s.raw_provider = b.raw_of(0).provider_name();
  s.raw_endpoint = b.raw_of(0).endpoint_name();
  s.raw_wait = b.raw_of(0).wait_policy();
  s.raw_detail = raw::libfabric_version();
  s.lib_provider = b.lib_of(0).fabric().provider();
  s.lib_endpoint = b.lib_of(0).endpoint_name();
  s.lib_wait = b.lib_of(0).wait_policy();
  s.lib_detail = b.lib_of(0).fabric().describe();
  s.provider = both_or_each(s.raw_provider, s.lib_provider);
  s.endpoint = both_or_each(s.raw_endpoint, s.lib_endpoint);
  s.wait = both_or_each(s.raw_wait, s.lib_wait);
  if (s.raw_provider != s.lib_provider || s.raw_endpoint != s.lib_endpoint)
    std::fprintf(stderr,
                 "[client] warning: the two implementations opened different transports "
                 "(provider %s, endpoint %s); the ratio compares them too\n",
                 s.provider.c_str(), s.endpoint.c_str());
  print_header(o, s);

  std::vector<Comparison> rows;
  std::vector<double> block_us, raw_all, lib_all;
  uint32_t tag = 0;
  for (Mode mode : o.modes) {
    for (size_t size : o.sizes) {
      Schedule sched = block_schedule(o, size);
      Comparison c{};
      c.mode = mode;
      c.size = size;
      c.block = sched.iters;
      c.warm = sched.warm;
      raw_all.clear();
      lib_all.clear();
      // Capped: -n may be huge (a run ended by its peer or deadline).
      const size_t cap = size_t(1) << 22;
      block_us.reserve(std::min(sched.iters, cap));
      raw_all.reserve(std::min(g_rounds * sched.iters, cap));
      lib_all.reserve(std::min(g_rounds * sched.iters, cap));
      for (size_t round = 0; round < g_rounds; ++round) {
        double med[2] = {0, 0}, iqm[2] = {0, 0}; // [raw, rdmalib]
        for (int k = 0; k < 2; ++k) {
          Impl impl = impl_of(round, k);
          if (impl == Impl::Raw)
            ping_block(b.raw_of(round), mode, size, sched, oob, tag, block_us, g_reply);
          else if (!b.raw2.empty())
            ping_block(b.raw2_of(round), mode, size, sched, oob, tag, block_us, g_reply);
          else
            ping_block(b.lib_of(round), mode, size, sched, oob, tag, block_us, g_reply);
          std::vector<double> &all = impl == Impl::Raw ? raw_all : lib_all;
          all.insert(all.end(), block_us.begin(), block_us.end());
          // One sort for both statistics (ping_block clears block_us first).
          std::sort(block_us.begin(), block_us.end());
          med[impl == Impl::Raw ? 0 : 1] = st::median_sorted(block_us);
          iqm[impl == Impl::Raw ? 0 : 1] = st::iqm_sorted(block_us);
        }
        if (med[0] > 0)
          c.round_ratios.push_back(med[1] / med[0]);
        if (iqm[0] > 0) {
          c.round_iqm_ratios.push_back(iqm[1] / iqm[0]);
          c.round_iqm_extra_ns.push_back((iqm[1] - iqm[0]) * 1e3);
        }
      }
      c.raw = summarise(mode, size, raw_all);
      c.lib = summarise(mode, size, lib_all);
      c.ratio_of_medians = c.raw.median_us > 0 ? c.lib.median_us / c.raw.median_us : 0;
      if (!c.round_ratios.empty()) {
        c.round_median = st::median(c.round_ratios);
        auto mm = std::minmax_element(c.round_ratios.begin(), c.round_ratios.end());
        c.round_min = *mm.first;
        c.round_max = *mm.second;
      }
      c.round_iqm_median = st::median(c.round_iqm_ratios);
      c.round_extra_ns = st::median(c.round_iqm_extra_ns);
      rows.push_back(std::move(c));
      print_row(rows.back());
    }
  }
  write_csv(o, s, rows);
  write_json(o, s, rows);
  oob.barrier(~0u, "the server to finish");
  b.close();
}

} // namespace

std::string pingpong::version_text(const char *program) {
  return std::string(program) + " (rFaaS " RFAAS_VERSION "), network backend " +
         rdmalib::Fabric::backend_name() + " " + rdmalib::Fabric::backend_version() +
         ", raw baseline libfabric " + raw::libfabric_version();
}

int main(int argc, char **argv) {
  ExtraOptions extra;
  extra.add = [](rfaas::cli::Options &spec) {
    add_reply_option(spec);
    spec.add_options()("rounds",
                       "rounds per (mode,size); each runs one block on raw and one on rdmalib, "
                       "raw first in even rounds, rdmalib first in odd ones",
                       rfaas::cli::value<size_t>()->default_value("40"))(
        "endpoints",
        "connections of each implementation; round r runs on the (r mod N)-th of each, so "
        "that one pair of endpoints' placement (a few % on shm) averages out within the run",
        rfaas::cli::value<size_t>()->default_value("1"))(
        "self-check",
        "run a second raw endpoint in rdmalib's blocks: every ratio then compares raw with "
        "raw and shows the method's own bias (expect 1.000)");
  };
  extra.read = [](const rfaas::cli::ParseResult &r) {
    g_rounds = r["rounds"].as<size_t>();
    if (g_rounds < 1 || g_rounds > 1000000)
      throw std::invalid_argument("--rounds must be between 1 and 1000000");
    g_endpoints = r["endpoints"].as<size_t>();
    if (g_endpoints < 1 || g_endpoints > 16)
      throw std::invalid_argument("--endpoints must be between 1 and 16");
    g_self_check = r.count("self-check") != 0;
    read_reply_option(r);
  };
  // Both sides of a two-host run must agree on these too (run_fingerprint).
  extra.fingerprint = [] {
    return "rounds=" + std::to_string(g_rounds) + " endpoints=" + std::to_string(g_endpoints) +
           (g_self_check ? " self-check" : "") + " " + reply_fingerprint();
  };
  extra.iters_help = "measured round trips per block (0 = 1000 up to 1 KiB, 200 up to 64 KiB, "
                     "30 above)";
  extra.warmup_help = "unmeasured round trips before each block (0 = a tenth of the block, at "
                      "least 10)";
  extra.budget_help = "seconds per block after which the block stops early, once at least "
                      "min(block,500) round trips are in (0 = never; a safety valve: a block "
                      "takes milliseconds)";
  return guarded_main(
      argc, argv, "raw_vs_rdmalib_pingpong",
      "The raw libfabric ping-pong and the rdmalib one in the same two processes, alternating\n"
      "in short blocks, so that both see the same machine state: on a shared host the round\n"
      "trip changes level from one run to the next, which makes the ratio of two separate\n"
      "runs (run-pingpong.sh) noisy.\n"
      "Per (mode,size): --rounds rounds, each one block on raw and one on rdmalib, raw first\n"
      "in even rounds and rdmalib first in odd ones; a block is -w unmeasured and -n measured\n"
      "round trips, exactly those of raw_libfabric_pingpong and rdmalib_pingpong.\n"
      "Prints raw and rdmalib median and p99 over all blocks (us), the ratio of those medians\n"
      "(lib/raw), and the median, min and max over rounds of the per-round ratio, rdmalib's\n"
      "block median over raw's block median of the same round (rnd_med, rnd_min, rnd_max).",
      [](const Options &o) {
        // The start-up line (Fabric::describe) goes into our header;
        // keep rdmalib's own info logging out of the table.
        spdlog::set_level(spdlog::level::warn);
        rdside::reclaim_stale_regions();
        return run_pair(
            o, [&](Oob &oob) { server(o, oob); }, [&](Oob &oob) { client(o, oob); });
      },
      extra);
}
