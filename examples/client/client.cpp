// rfaas-example-client: leases cores from an executor manager, ships
// libfunctions.so (examples/functions) and exercises every way of calling:
// synchronous, asynchronous and parallel, each output verified, then measures
// hot invocation latency.
//
//   rfaas-example-client --devices config/devices.json --device lo-tcp
//       --servers config/servers.json --library build/examples/functions/libfunctions.so
//   (one command line; with --resource-manager HOST:PORT instead of --servers,
//   the cores are leased from the resource manager first, and so they are
//   when RFAAS_RESOURCE_MANAGER is set and none of --resource-manager,
//   --manager and --servers is given)
//
// Exit status 0 only if every output was right.
#include <rfaas/rfaas.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <future>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "options.hpp"

#include "cli.hpp"

namespace {

int g_failures = 0;
int g_verified = 0;

void check(bool ok, const std::string &what) {
  if (ok) {
    ++g_verified;
    return;
  }
  ++g_failures;
  std::fprintf(stderr, "FAILED: %s\n", what.c_str());
}

void check_result(const rfaas::result &r, const std::string &what) {
  if (!r.ok()) {
    ++g_failures;
    std::fprintf(stderr, "FAILED: %s: status %s (detail %u)\n", what.c_str(),
                 rfaas::to_string(r.status), r.detail);
  }
}

std::vector<uint8_t> pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<uint8_t>((i * 131 + seed * 7 + (i >> 8)) & 0xFF);
  return v;
}

uint64_t sum_squares(const std::vector<uint64_t> &v) {
  uint64_t s = 0;
  for (uint64_t x : v)
    s += x * x;
  return s;
}

} // namespace

int main(int argc, char **argv) {
  rfaas::cli::Options cli(
      "rfaas-example-client",
      "Lease cores from an rFaaS executor manager and call the example functions "
      "(echo, sum_squares, expand) synchronously, asynchronously and in parallel, "
      "verifying every output; then print the median hot latency.");
  // clang-format off
  cli.add_options()
    ("devices", "device database (JSON)", rfaas::cli::value<std::string>()->default_value("config/devices.json"))
    ("device", "device entry to use (name or IP)", rfaas::cli::value<std::string>()->default_value("lo-tcp"))
    ("servers", "server database (JSON) listing executor managers", rfaas::cli::value<std::string>()->default_value("config/servers.json"))
    ("manager", "executor manager host:port (overrides --servers)", rfaas::cli::value<std::string>())
    ("resource-manager", "lease the cores from the resource manager at host:port (its fabric address) instead of using --manager/--servers (default: $RFAAS_RESOURCE_MANAGER when neither is given)", rfaas::cli::value<std::string>())
    ("memory", "MiB to lease with --resource-manager", rfaas::cli::value<uint64_t>()->default_value("256"))
    ("library", "function library to ship", rfaas::cli::value<std::string>())
    ("cores", "cores to lease (the shipped config/executor_manager.json offers 1)", rfaas::cli::value<uint32_t>()->default_value("1"))
    ("slots", "input slots per worker", rfaas::cli::value<uint32_t>()->default_value("2"))
    ("hot-timeout", "worker hot-polling time in ms (-1 always hot, 0 never)", rfaas::cli::value<int32_t>()->default_value("-1"))
    ("size", "payload of the latency measurement, bytes", rfaas::cli::value<uint32_t>()->default_value("8"))
    ("repetitions", "hot invocations measured", rfaas::cli::value<uint32_t>()->default_value("1000"));
  // clang-format on
  rfaas::cli::add_standard_options(cli);
  return rfaas::cli::run(
      "rfaas-example-client", cli, argc, argv, [&](const rfaas::cli::ParseResult &args) {
        if (!args.count("library"))
          throw rfaas::cli::UsageError(
              "--library FILE is required (build/examples/functions/libfunctions.so)");
        // --log-level, then RFAAS_LOG_LEVEL, then warn: what rfaas::set_log_level sets.
        rfaas::set_log_level(rdmalib::log::to_string(rfaas::cli::apply_log_level(args)));
        rfaas::device_database devices =
            rfaas::device_database::load(args["devices"].as<std::string>());
        const rfaas::device &device = devices.find(args["device"].as<std::string>());
        rfaas::server manager;
        // With a resource manager: lease first, then allocate on the node it
        // names, presenting the lease; released at the end (or it expires).
        std::unique_ptr<rfaas::resource_manager> rm;
        rfaas::lease lease;
        // Without --resource-manager, --manager or --servers, a deployment's
        // RFAAS_RESOURCE_MANAGER (rfaas-slurm exports it) names the resource
        // manager: librfaas reads it when given an empty address.
        const char *deployed = std::getenv("RFAAS_RESOURCE_MANAGER");
        const bool from_environment = deployed != nullptr && *deployed != '\0' &&
                                      !args.count("manager") && !args.count("servers");
        if (args.count("resource-manager") || from_environment) {
          rm = std::make_unique<rfaas::resource_manager>(
              device, args.count("resource-manager") ? args["resource-manager"].as<std::string>()
                                                     : std::string());
          lease = rm->lease(args["cores"].as<uint32_t>(), args["memory"].as<uint64_t>(),
                            std::chrono::minutes(5));
          manager = lease.server(0);
          std::printf("lease %llu: %u core(s) on node %s (%s)\n",
                      static_cast<unsigned long long>(lease.id), lease.parts[0].cores,
                      lease.parts[0].node.c_str(), manager.endpoint().c_str());
          // How this client was identified: by MUNGE, or not at all.
          if (lease.owner_uid != rfaas::lease::anonymous_uid)
            std::printf("lease owner: uid %u (MUNGE credential)\n", lease.owner_uid);
          else if (rm->credential_problem().empty())
            std::printf("lease owner: anonymous (the resource manager does not authenticate "
                        "clients)\n");
          else
            std::printf("lease owner: anonymous (no MUNGE credential: %s)\n",
                        rm->credential_problem().c_str());
        } else if (args.count("manager")) {
          manager = rfaas::server::parse(args["manager"].as<std::string>());
        } else {
          rfaas::server_database servers =
              rfaas::server_database::load(args["servers"].as<std::string>());
          manager = servers.select();
        }

        rfaas::executor ex(device);
        rfaas::allocation_options opts;
        if (rm)
          opts = lease.options(0);
        opts.cores = args["cores"].as<uint32_t>();
        opts.slots = args["slots"].as<uint32_t>();
        opts.library = args["library"].as<std::string>();
        opts.hot_timeout_ms = args["hot-timeout"].as<int32_t>();
        opts.max_input_size = 64 * 1024;
        opts.max_output_size = 4 * 64 * 1024; // expand writes 4x its input
        ex.allocate(manager, opts);
        const rfaas::cold_start &cold = ex.cold_start_times();
        auto ms = [](std::chrono::nanoseconds d) { return d.count() / 1e6; };
        std::printf("allocated %u workers on %s (allocation %016llx): connected %.1f ms, "
                    "allocated %.1f ms, workers %.1f ms, code %.1f ms, ready %.1f ms\n",
                    ex.workers(), manager.endpoint().c_str(),
                    static_cast<unsigned long long>(ex.allocation_id()), ms(cold.connected),
                    ms(cold.allocated), ms(cold.workers_connected), ms(cold.code_shipped),
                    ms(cold.ready));

        // ---- synchronous ----
        std::vector<uint8_t> out(opts.max_output_size);
        for (size_t size : {size_t(1), size_t(100), size_t(4096), size_t(64 * 1024)}) {
          std::vector<uint8_t> in = pattern(size, static_cast<uint32_t>(size));
          rfaas::result r = ex.execute("echo", in, out);
          check_result(r, "echo " + std::to_string(size));
          check(r.ok() && r.output_size == size && std::equal(in.begin(), in.end(), out.begin()),
                "echo output of " + std::to_string(size) + " bytes");
        }
        // Zero copy: the payload is written from registered memory.
        rfaas::allocator<uint64_t> alloc(ex);
        std::vector<uint64_t, rfaas::allocator<uint64_t>> values(alloc);
        values.resize(1000);
        std::iota(values.begin(), values.end(), 1);
        {
          uint64_t got = 0;
          rfaas::result r =
              ex.execute("sum_squares", values, rfaas::mutable_buffer(&got, sizeof got));
          check_result(r, "sum_squares");
          check(r.ok() && r.output_size == 8 &&
                    got == sum_squares(std::vector<uint64_t>(values.begin(), values.end())),
                "sum_squares of 1..1000");
        }
        {
          std::vector<uint8_t> in = pattern(1000, 3);
          rfaas::result r = ex.execute("expand", in, out);
          check_result(r, "expand");
          bool same = r.ok() && r.output_size == 4 * in.size();
          for (size_t k = 0; same && k < 4; ++k)
            same = std::equal(in.begin(), in.end(), out.begin() + k * in.size());
          check(same, "expand output is 4 copies of its input");
        }
        {
          rfaas::result r = ex.execute("no_such_function", values, out);
          check(r.status == rfaas::status::unknown_function,
                std::string("unknown function reported (got ") + rfaas::to_string(r.status) + ")");
        }

        // ---- asynchronous: one call per slot, all in flight at once ----
        {
          const size_t n = size_t(ex.workers()) * ex.slots();
          std::vector<std::vector<uint8_t>> ins, outs;
          for (size_t i = 0; i < n; ++i) {
            ins.push_back(pattern(512 + i, static_cast<uint32_t>(i)));
            outs.emplace_back(ins.back().size());
          }
          std::vector<rfaas::async_result> futures;
          for (size_t i = 0; i < n; ++i)
            futures.push_back(ex.async("echo", ins[i], outs[i]));
          for (size_t i = 0; i < n; ++i) {
            rfaas::result r = futures[i].get();
            check_result(r, "async echo " + std::to_string(i));
            check(r.ok() && outs[i] == ins[i], "async echo output " + std::to_string(i));
          }
        }

        // ---- parallel: one sum_squares per worker and slot, then twice that ----
        for (size_t n : {size_t(ex.workers()), size_t(2) * ex.workers() * ex.slots() + 1}) {
          std::vector<std::vector<uint64_t>> ins(n);
          std::vector<uint64_t> sums(n, 0);
          std::vector<rfaas::const_buffer> in_bufs;
          std::vector<rfaas::mutable_buffer> out_bufs;
          for (size_t i = 0; i < n; ++i) {
            ins[i].resize(100 + i);
            std::iota(ins[i].begin(), ins[i].end(), i);
            in_bufs.emplace_back(ins[i]);
            out_bufs.emplace_back(&sums[i], sizeof(uint64_t));
          }
          std::vector<rfaas::result> rs = ex.execute_parallel("sum_squares", in_bufs, out_bufs);
          for (size_t i = 0; i < n; ++i) {
            check_result(rs[i], "parallel sum_squares " + std::to_string(i));
            check(rs[i].ok() && sums[i] == sum_squares(ins[i]),
                  "parallel sum_squares output " + std::to_string(i) + " of " + std::to_string(n));
          }
        }

        // ---- hot latency ----
        const uint32_t size = args["size"].as<uint32_t>();
        const uint32_t reps = std::max<uint32_t>(1, args["repetitions"].as<uint32_t>());
        std::vector<uint8_t, rfaas::allocator<uint8_t>> in(size, 7, rfaas::allocator<uint8_t>(ex));
        std::vector<double> us;
        us.reserve(reps);
        uint32_t failed_calls = 0;
        for (uint32_t i = 0; i < reps / 10 + 1; ++i) // warm up
          ex.execute("echo", in, out);
        bool all_ok = true;
        for (uint32_t i = 0; i < reps; ++i) {
          in[0] = static_cast<uint8_t>(i);
          auto t0 = std::chrono::steady_clock::now();
          rfaas::result r = ex.execute("echo", in, out);
          auto t1 = std::chrono::steady_clock::now();
          bool ok = r.ok() && r.output_size == size && out[0] == static_cast<uint8_t>(i);
          all_ok = all_ok && ok;
          if (!ok) {
            // A failed call's time says nothing about hot latency (a dead manager
            // fails calls in microseconds); after the first, stop measuring.
            if (failed_calls++ == 0)
              std::fprintf(stderr, "FAILED: hot echo %u: status %s\n", i,
                           rfaas::to_string(r.status));
            if (failed_calls >= 10)
              break;
            continue;
          }
          us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        check(all_ok, "every measured echo returned its input");
        std::sort(us.begin(), us.end());
        ex.deallocate();
        if (rm) {
          rm->release(lease);
          std::printf("lease %llu released\n", static_cast<unsigned long long>(lease.id));
        }
        std::printf("verified %d results, %d failures\n", g_verified, g_failures);
        if (failed_calls == 0)
          std::printf("median hot latency: %.2f us (p99 %.2f us, %u echo calls of %u bytes, %s)\n",
                      us[us.size() / 2], us[std::min(us.size() - 1, us.size() * 99 / 100)], reps,
                      size, args["device"].as<std::string>().c_str());
        else
          std::printf("no latency figure: %u measured call(s) failed\n", failed_calls);
        return g_failures == 0 ? 0 : 1;
      });
}
