// rfaas_cold_benchmark: cold start through librfaas, from allocate() to the
// first result, split into the phases librfaas records plus the first
// invocation, each printed as its own duration:
//   connect       allocate() called -> linked to the executor manager
//   allocated     -> the manager answered the AllocationRequest (its
//                    executor was started: forked, or taken from the pool)
//   workers       -> the executor's workers connected back and advertised
//                    their input slots
//   code          -> the library's CodeHeader sent to worker 0
//   ready         -> the library read, loaded, and every worker Ready
//   invoke        -> the first invocation's result back
//   first_result  the whole: allocate() called -> first result
// The network is opened once (executor construction: loading the provider is
// the process's cost, not the allocation's); each repetition allocates,
// invokes echo once, and deallocates. By default each allocation meets an
// idle manager (--idle-ms after the previous deallocate: its executor has
// exited and what the manager and librfaas open ahead is open again), which
// is what a job's first allocation sees; --idle-ms 0 measures allocations
// back to back instead.
#include "rfaas_common.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "options.hpp"

int main(int argc, char **argv) {
  rfaas::cli::Options cli("rfaas_cold_benchmark",
                          "Cold start through librfaas: allocate() to the first result, by phase.");
  rfaas::bench::add_common_options(cli);
  // clang-format off
  cli.add_options()
    ("cores", "cores per allocation", rfaas::cli::value<uint32_t>()->default_value("1"))
    ("r,repetitions", "allocations measured", rfaas::cli::value<size_t>()->default_value("20"))
    ("idle-ms", "pause after each deallocate, not timed (0: back to back)",
     rfaas::cli::value<uint32_t>()->default_value("200"))
    ("slowest", "also print the phases of the N slowest allocations, each with its "
     "start time (steady clock, us), to find what the tail waits on",
     rfaas::cli::value<size_t>()->default_value("0"));
  // clang-format on
  rfaas::cli::ParseResult args;
  int status = 0;
  if (!rfaas::bench::parse_or_usage(cli, argc, argv, args, status))
    return status;
  try {
    rfaas::device dev = rfaas::device_database::load(args["devices"].as<std::string>())
                            .find(args["device"].as<std::string>());
    rfaas::server manager = rfaas::bench::parse_manager(args["manager"].as<std::string>());
    rfaas::executor ex(dev);
    rfaas::allocation_options o;
    o.cores = args["cores"].as<uint32_t>();
    o.library = args["library"].as<std::string>();
    o.hot_timeout_ms = 0;
    o.max_input_size = 4096;
    o.max_output_size = 4096;
    const size_t reps = std::max<size_t>(1, args["repetitions"].as<size_t>());
    const auto idle = std::chrono::milliseconds(args["idle-ms"].as<uint32_t>());
    const char *names[] = {"connect", "allocated", "workers",     "code",
                           "ready",   "invoke",    "first_result"};
    constexpr int kPhases = sizeof names / sizeof names[0];
    std::vector<double> phase[kPhases];
    std::vector<uint8_t> in(8, 1), out(8);
    std::vector<double> started; // each allocation's start, steady clock, us
    // The first allocation too meets what librfaas opens ahead (the
    // endpoints of its links to the manager and to the workers, a core's
    // milliseconds each on shm) open and idle, as every later one does after
    // the pause below: measured at once, it waited for them, the slowest of
    // every run (shm: 50-130 ms against a median of 4-20 ms on a loaded
    // host) and alone the p99 of a 20-allocation run.
    std::this_thread::sleep_for(idle);
    for (size_t i = 0; i < reps; ++i) {
      // The previous lease's core is free once its executor has exited,
      // shortly after deallocate() returned: a refusal for that reason is
      // retried, and only the attempt that succeeds is timed.
      auto t0 = std::chrono::steady_clock::now();
      for (auto until = t0 + std::chrono::seconds(10);;) {
        t0 = std::chrono::steady_clock::now();
        try {
          ex.allocate(manager, o);
          break;
        } catch (const rfaas::Error &e) {
          if (e.code() != rfaas::status::resources_unavailable || t0 > until)
            throw;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      rfaas::result r = ex.execute("echo", in, out);
      auto t1 = std::chrono::steady_clock::now();
      if (!r.ok()) {
        std::fprintf(stderr, "first call failed: %s\n", rfaas::to_string(r.status));
        return 1;
      }
      const rfaas::cold_start &c = ex.cold_start_times();
      auto us = [](std::chrono::nanoseconds d) { return d.count() / 1000.0; };
      // Each phase as its own duration (not cumulative).
      phase[0].push_back(us(c.connected));
      phase[1].push_back(us(c.allocated - c.connected));
      phase[2].push_back(us(c.workers_connected - c.allocated));
      phase[3].push_back(us(c.code_shipped - c.workers_connected));
      phase[4].push_back(us(c.ready - c.code_shipped));
      const double total = std::chrono::duration<double, std::micro>(t1 - t0).count();
      phase[5].push_back(total - us(c.ready));
      phase[6].push_back(total);
      started.push_back(std::chrono::duration<double, std::micro>(t0.time_since_epoch()).count());
      ex.deallocate();
      std::this_thread::sleep_for(idle);
    }
    const std::string provider = dev.provider.empty() ? dev.name : dev.provider;
    rfaas::bench::Csv csv(args["csv"].as<std::string>());
    std::printf("# rfaas_cold_benchmark device=%s provider=%s cores=%u repetitions=%zu "
                "idle_ms=%lld\n",
                dev.name.c_str(), provider.c_str(), o.cores, reps,
                static_cast<long long>(idle.count()));
    std::printf("%-14s %11s %11s %11s\n", "phase", "median_us", "p99_us", "min_us");
    bench_json::Value doc = rfaas::bench::document("rfaas_cold_benchmark", argc, argv, dev,
                                                   ex.describe_network(), args);
    doc["parameters"]["cores"] = o.cores;
    doc["parameters"]["repetitions"] = reps;
    doc["parameters"]["idle_ms"] = static_cast<uint64_t>(idle.count());
    for (int k = 0; k < kPhases; ++k) {
      rfaas::bench::Stats s = rfaas::bench::stats(phase[k]);
      std::printf("%-14s %11.1f %11.1f %11.1f\n", names[k], s.median, s.p99, s.min);
      csv.row("rfaas-cold", provider, "cores" + std::to_string(o.cores), names[k], 8, s);
      bench_json::Value v = rfaas::bench::latency_result(names[k], 8, s);
      v["kind"] = "phase";
      doc["results"].push(std::move(v));
    }
    rfaas::bench::write_json(args, doc);
    // The tail, allocation by allocation: which phase a slow one lost its
    // time in, and when (to match against the servers' log timestamps).
    if (size_t n = std::min(args["slowest"].as<size_t>(), reps)) {
      std::vector<size_t> order(reps);
      for (size_t i = 0; i < reps; ++i)
        order[i] = i;
      std::sort(order.begin(), order.end(),
                [&](size_t a, size_t b) { return phase[6][a] > phase[6][b]; });
      std::printf("# the %zu slowest allocations (us)\n%-6s %16s", n, "run", "start_us");
      for (int k = 0; k < kPhases; ++k)
        std::printf(" %12s", names[k]);
      std::printf("\n");
      for (size_t j = 0; j < n; ++j) {
        const size_t i = order[j];
        std::printf("%-6zu %16.0f", i, started[i]);
        for (int k = 0; k < kPhases; ++k)
          std::printf(" %12.1f", phase[k][i]);
        std::printf("\n");
      }
    }
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rfaas_cold_benchmark: %s\n", e.what());
    return 1;
  }
  return 0;
}
