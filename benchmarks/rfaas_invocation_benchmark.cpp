// rfaas_invocation_benchmark: latency of hot (or warm) invocations through
// librfaas, one worker, echo of 8 B .. 1 MiB: the figure compared with the raw
// libfabric write-with-immediate ping-pong by run-rfaas-benchmarks.sh.
//
// One call is: header + payload written with one write_imm from registered
// memory (rfaas::allocator, zero copy), the worker runs echo and writes header
// + output back with one write_imm straight into the registered output (no
// copy on the client; --output plain: into a result slot, then copied into a
// plain vector), the client busy-polls for it. --hot-timeout sets how long the
// worker spins between calls (-1 always, 0 never: every call then wakes a
// sleeping worker).
#include "rfaas_common.hpp"

#include <chrono>
#include <cstring>
#include <stdexcept>

#include "options.hpp"

int main(int argc, char **argv) {
  rfaas::cli::Options cli("rfaas_invocation_benchmark",
                          "Hot/warm invocation latency through librfaas (echo), per payload size.");
  rfaas::bench::add_common_options(cli);
  rfaas::bench::add_settle_option(cli);
  // clang-format off
  cli.add_options()
    ("s,sizes", "payload sizes (suffix K, M)", rfaas::cli::value<std::string>()->default_value("8,1K,64K,1M"))
    ("hot-timeout", "worker hot-polling ms: -1 always hot, 0 never", rfaas::cli::value<int32_t>()->default_value("-1"))
    ("n,iters", "measured calls per size (0 = 10000 up to 1 KiB, 2000 up to 64 KiB, 300 above)", rfaas::cli::value<size_t>()->default_value("0"))
    ("b,budget", "seconds per size after which measuring stops (once 500 calls are in)", rfaas::cli::value<double>()->default_value("1"))
    ("output", "output memory: registered (rfaas::allocator, result written in place) or plain (copied out of a result slot)", rfaas::cli::value<std::string>()->default_value("registered"))
    ("function", "echo (copies its input to its output) or echo_in_place (its input is its output: nothing copied, like the raw ping-pong)", rfaas::cli::value<std::string>()->default_value("echo"));
  // clang-format on
  rfaas::cli::ParseResult args;
  int status = 0;
  if (!rfaas::bench::parse_or_usage(cli, argc, argv, args, status))
    return status;
  try {
    const std::vector<size_t> sizes = rfaas::bench::parse_sizes(args["sizes"].as<std::string>());
    const size_t largest = *std::max_element(sizes.begin(), sizes.end());
    rfaas::device dev = rfaas::device_database::load(args["devices"].as<std::string>())
                            .find(args["device"].as<std::string>());
    const std::string output_memory = args["output"].as<std::string>();
    if (output_memory != "registered" && output_memory != "plain")
      throw std::invalid_argument("--output must be registered or plain, not \"" + output_memory +
                                  "\"");
    const std::string function = args["function"].as<std::string>();
    if (function != "echo" && function != "echo_in_place")
      throw std::invalid_argument("--function must be echo or echo_in_place, not \"" + function +
                                  "\"");
    // Named once, as a caller that repeats a call would (rfaas/function_name.hpp).
    const rfaas::function_name fn(function);
    rfaas::executor ex(dev);
    rfaas::allocation_options o;
    o.cores = 1;
    o.library = args["library"].as<std::string>();
    o.hot_timeout_ms = args["hot-timeout"].as<int32_t>();
    o.max_input_size = static_cast<uint32_t>(largest);
    o.max_output_size = static_cast<uint32_t>(largest);
    ex.allocate(rfaas::bench::parse_manager(args["manager"].as<std::string>()), o);
    rfaas::bench::settle(args);

    const std::string provider = dev.provider.empty() ? dev.name : dev.provider;
    const std::string wait = "hot" + std::to_string(o.hot_timeout_ms);
    rfaas::bench::Csv csv(args["csv"].as<std::string>());
    std::printf("# rfaas_invocation_benchmark device=%s provider=%s hot_timeout_ms=%d output=%s "
                "function=%s\n",
                dev.name.c_str(), provider.c_str(), o.hot_timeout_ms, output_memory.c_str(),
                function.c_str());
    std::printf("%-10s %8s %7s %11s %11s %11s %11s\n", "mode", "size", "iters", "median_us",
                "p99_us", "min_us", "mean_us");
    std::vector<uint8_t, rfaas::allocator<uint8_t>> in(largest, 1, rfaas::allocator<uint8_t>(ex));
    std::vector<uint8_t, rfaas::allocator<uint8_t>> registered_out(
        output_memory == "registered" ? largest : 0, 0, rfaas::allocator<uint8_t>(ex));
    std::vector<uint8_t> plain_out(output_memory == "plain" ? largest : 0);
    const rfaas::mutable_buffer out = output_memory == "registered"
                                          ? rfaas::mutable_buffer(registered_out.data(), largest)
                                          : rfaas::mutable_buffer(plain_out.data(), largest);
    const uint8_t *out_bytes = static_cast<const uint8_t *>(out.data);
    const double budget_s = args["budget"].as<double>();
    bench_json::Value doc = rfaas::bench::document("rfaas_invocation_benchmark", argc, argv, dev,
                                                   ex.describe_network(), args);
    doc["parameters"]["hot_timeout_ms"] = o.hot_timeout_ms;
    doc["parameters"]["iters"] = args["iters"].as<size_t>();
    doc["parameters"]["budget_s"] = budget_s;
    doc["parameters"]["output"] = output_memory;
    doc["parameters"]["function"] = function;
    for (size_t size : sizes) {
      size_t iters = args["iters"].as<size_t>();
      if (iters == 0)
        iters = size <= 1024 ? 10000 : size <= 65536 ? 2000 : 300;
      rfaas::const_buffer input(in.data(), size);
      for (size_t i = 0; i < iters / 10 + 1; ++i)
        ex.execute(fn, input, out);
      std::vector<double> us;
      us.reserve(iters);
      const auto start = std::chrono::steady_clock::now();
      for (size_t i = 0; i < iters; ++i) {
        in[0] = static_cast<uint8_t>(i);
        auto t0 = std::chrono::steady_clock::now();
        rfaas::result r = ex.execute(fn, input, out);
        auto t1 = std::chrono::steady_clock::now();
        if (!r.ok() || r.output_size != size || out_bytes[0] != static_cast<uint8_t>(i)) {
          std::fprintf(stderr, "call %zu of %zu B failed: %s\n", i, size,
                       rfaas::to_string(r.status));
          return 1;
        }
        us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        if (budget_s > 0 && us.size() >= std::min<size_t>(iters, 500) &&
            std::chrono::duration<double>(t1 - start).count() > budget_s)
          break;
      }
      rfaas::bench::Stats s = rfaas::bench::stats(us);
      std::printf("%-10s %8zu %7zu %11.2f %11.2f %11.2f %11.2f\n", function.c_str(), size, s.n,
                  s.median, s.p99, s.min, s.mean);
      csv.row("rfaas", provider, wait, function, size, s);
      doc["results"].push(rfaas::bench::latency_result(function, size, s));
    }
    rfaas::bench::write_json(args, doc);
  } catch (const std::exception &e) {
    std::fprintf(stderr, "rfaas_invocation_benchmark: %s\n", e.what());
    return 1;
  }
  return 0;
}
