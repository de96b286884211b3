// rfaas_parallel_benchmark: one invocation on every leased core at once
// (executor::execute_parallel), against one invocation on one core of the same
// allocation in the same run: the batch's latency over the single call's says
// what fanning out costs, and cores / batch latency is the invocation rate the
// batch reaches.
//
// Inputs are registered memory (rfaas::allocator), one buffer per core; every
// output is checked against the sequence number stamped into its input.
#include "rfaas_common.hpp"

#include <chrono>
#include <cstring>

#include "options.hpp"

/// Named once: the hot loops pass the hash, not the name (rfaas/function_name.hpp).
static constexpr rfaas::function_name kEcho("echo");

int main(int argc, char **argv) {
  rfaas::cli::Options cli("rfaas_parallel_benchmark",
                          "execute_parallel on every leased core against one execute(), echo.");
  rfaas::bench::add_common_options(cli);
  rfaas::bench::add_settle_option(cli);
  // clang-format off
  cli.add_options()
    ("s,sizes", "payload sizes (suffix K, M)", rfaas::cli::value<std::string>()->default_value("8,1K,64K"))
    ("cores", "cores to lease (one invocation each per batch)", rfaas::cli::value<uint32_t>()->default_value("2"))
    ("hot-timeout", "worker hot-polling ms: -1 always hot, 0 never", rfaas::cli::value<int32_t>()->default_value("-1"))
    ("n,iters", "measured batches (and single calls) per size", rfaas::cli::value<size_t>()->default_value("5000"))
    ("b,budget", "seconds per size and kind after which measuring stops (once 200 are in)", rfaas::cli::value<double>()->default_value("1"));
  // clang-format on
  rfaas::cli::ParseResult args;
  int status = 0;
  if (!rfaas::bench::parse_or_usage(cli, argc, argv, args, status))
    return status;
  try {
    const std::vector<size_t> sizes = rfaas::bench::parse_sizes(args["sizes"].as<std::string>());
    if (sizes.empty())
      throw rfaas::cli::UsageError("--sizes is empty");
    const size_t largest = std::max<size_t>(8, *std::max_element(sizes.begin(), sizes.end()));
    rfaas::device dev = rfaas::device_database::load(args["devices"].as<std::string>())
                            .find(args["device"].as<std::string>());
    rfaas::executor ex(dev);
    rfaas::allocation_options o;
    o.cores = args["cores"].as<uint32_t>();
    o.library = args["library"].as<std::string>();
    o.hot_timeout_ms = args["hot-timeout"].as<int32_t>();
    o.max_input_size = static_cast<uint32_t>(largest);
    o.max_output_size = static_cast<uint32_t>(largest);
    ex.allocate(rfaas::bench::parse_manager(args["manager"].as<std::string>()), o);
    rfaas::bench::settle(args);
    const uint32_t cores = ex.workers();
    const size_t iters = std::max<size_t>(1, args["iters"].as<size_t>());
    const double budget_s = args["budget"].as<double>();

    using Input = std::vector<uint8_t, rfaas::allocator<uint8_t>>;
    std::vector<Input> in;
    std::vector<std::vector<uint8_t>> out(cores, std::vector<uint8_t>(largest));
    for (uint32_t k = 0; k < cores; ++k)
      in.emplace_back(largest, uint8_t(0x5A), rfaas::allocator<uint8_t>(ex));
    uint64_t seq = 0;

    const std::string network = ex.describe_network();
    const std::string provider = rfaas::bench::network_field(network, "provider");
    std::printf("# rfaas_parallel_benchmark device=%s provider=%s cores=%u hot_timeout_ms=%d\n",
                dev.name.c_str(), provider.c_str(), cores, o.hot_timeout_ms);
    std::printf("%-9s %8s %6s %7s %11s %11s %11s %13s %7s\n", "mode", "size", "cores", "iters",
                "median_us", "p99_us", "min_us", "invocations/s", "ratio");
    bench_json::Value doc =
        rfaas::bench::document("rfaas_parallel_benchmark", argc, argv, dev, network, args);
    doc["parameters"]["cores"] = cores;
    doc["parameters"]["hot_timeout_ms"] = o.hot_timeout_ms;
    doc["parameters"]["iters"] = iters;
    doc["parameters"]["budget_s"] = budget_s;
    rfaas::bench::Csv csv(args["csv"].as<std::string>());
    const std::string wait = "hot" + std::to_string(o.hot_timeout_ms);

    for (size_t size : sizes) {
      const size_t stamp_bytes = std::min<size_t>(size, sizeof seq);
      std::vector<rfaas::const_buffer> inputs;
      std::vector<rfaas::mutable_buffer> outputs;
      for (uint32_t k = 0; k < cores; ++k) {
        inputs.emplace_back(in[k].data(), size);
        outputs.emplace_back(out[k].data(), out[k].size());
      }
      auto check = [&](const rfaas::result &r, uint32_t k, uint64_t stamp) {
        if (!r.ok() || r.output_size != size ||
            std::memcmp(out[k].data(), &stamp, stamp_bytes) != 0)
          throw std::runtime_error("echo of " + std::to_string(size) + " B on core " +
                                   std::to_string(k) + " failed: " + rfaas::to_string(r.status));
      };
      // One call on one core, then one on every core, alternating per size so
      // that a change of load on the shared host hits both.
      std::vector<double> single, batch;
      std::vector<uint64_t> stamps(cores);
      const size_t warm = iters / 10 + 1;
      const auto start = std::chrono::steady_clock::now();
      for (size_t i = 0; i < warm + iters; ++i) {
        const uint64_t s1 = ++seq;
        std::memcpy(in[0].data(), &s1, stamp_bytes);
        auto t0 = std::chrono::steady_clock::now();
        rfaas::result r = ex.execute(kEcho, inputs[0], outputs[0]);
        auto t1 = std::chrono::steady_clock::now();
        check(r, 0, s1);
        for (uint32_t k = 0; k < cores; ++k) {
          stamps[k] = ++seq;
          std::memcpy(in[k].data(), &stamps[k], stamp_bytes);
        }
        auto t2 = std::chrono::steady_clock::now();
        std::vector<rfaas::result> rs = ex.execute_parallel(kEcho, inputs, outputs);
        auto t3 = std::chrono::steady_clock::now();
        for (uint32_t k = 0; k < cores; ++k)
          check(rs[k], k, stamps[k]);
        if (i < warm)
          continue;
        single.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        batch.push_back(std::chrono::duration<double, std::micro>(t3 - t2).count());
        if (budget_s > 0 && single.size() >= std::min<size_t>(iters, 200) &&
            std::chrono::duration<double>(t3 - start).count() > budget_s)
          break;
      }
      rfaas::bench::Stats s1 = rfaas::bench::stats(single), sb = rfaas::bench::stats(batch);
      const double ratio = s1.median > 0 ? sb.median / s1.median : 0;
      std::printf("%-9s %8zu %6u %7zu %11.2f %11.2f %11.2f %13.0f %7s\n", "single", size, 1u, s1.n,
                  s1.median, s1.p99, s1.min, 1e6 / s1.median, "-");
      std::printf("%-9s %8zu %6u %7zu %11.2f %11.2f %11.2f %13.0f %7.3f\n", "parallel", size, cores,
                  sb.n, sb.median, sb.p99, sb.min, cores * 1e6 / sb.median, ratio);
      std::fflush(stdout);
      csv.row("rfaas", provider, wait, "single", size, s1);
      csv.row("rfaas", provider, wait, "parallel" + std::to_string(cores), size, sb);
      bench_json::Value v1 = rfaas::bench::latency_result("single", size, s1);
      v1["cores"] = 1;
      v1["invocations_per_s"] = 1e6 / s1.median;
      doc["results"].push(std::move(v1));
      bench_json::Value vb = rfaas::bench::latency_result("parallel", size, sb);
      vb["cores"] = cores;
      vb["invocations_per_s"] = cores * 1e6 / sb.median;
      vb["ratio_to_single"] = ratio;
      doc["results"].push(std::move(vb));
    }
    rfaas::bench::write_json(args, doc);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rfaas_parallel_benchmark: %s\n", e.what());
    return 1;
  }
  return 0;
}
