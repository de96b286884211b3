// The two clients of the sandbox's escape suite (escape_test.sh), both on the
// public librfaas:
//   escape_client victim --until FILE ...   one core with the example
//       functions; echo calls with their outputs checked until FILE exists;
//       prints how many calls there were and how many were wrong
//   escape_client attack --attempts FILE ...  one core with the hostile
//       library (hostile_functions.cpp); runs each line "label function
//       argument" of FILE and prints "label<TAB>what the function wrote"
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <rfaas/rfaas.hpp>

namespace {

int usage() {
  std::fprintf(stderr, "usage: escape_client victim|attack --devices F --device D --manager "
                       "HOST:PORT --library L [--until FILE | --attempts FILE] [--memory MIB]\n"
                       "               [--image N]\n");
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2)
    return usage();
  const std::string mode = argv[1];
  std::string devices, device, manager, library, until, attempts;
  uint32_t memory = 0;
  uint16_t image = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--devices")
      devices = v;
    else if (k == "--device")
      device = v;
    else if (k == "--manager")
      manager = v;
    else if (k == "--library")
      library = v;
    else if (k == "--until")
      until = v;
    else if (k == "--attempts")
      attempts = v;
    else if (k == "--memory")
      memory = static_cast<uint32_t>(std::stoul(v));
    else if (k == "--image")
      image = static_cast<uint16_t>(std::stoul(v));
    else
      return usage();
  }
  if (devices.empty() || device.empty() || manager.empty() || library.empty())
    return usage();
  try {
    rfaas::device_database db = rfaas::device_database::load(devices);
    rfaas::executor ex(db.find(device));
    rfaas::allocation_options opts;
    opts.cores = 1;
    opts.memory_mib = memory;
    opts.image = image;
    opts.library = library;
    opts.hot_timeout_ms = 0;
    ex.allocate(rfaas::server::parse(manager), opts);
    std::printf("%s allocated %016llx\n", mode.c_str(),
                static_cast<unsigned long long>(ex.allocation_id()));
    std::fflush(stdout);
    std::vector<char> out(4096);
    if (mode == "victim") {
      unsigned long calls = 0, wrong = 0;
      for (;;) {
        const bool last = !until.empty() && access(until.c_str(), F_OK) == 0;
        std::string in = "victim call " + std::to_string(calls);
        rfaas::result r = ex.execute("echo", rfaas::const_buffer(in.data(), in.size()),
                                     rfaas::mutable_buffer(out.data(), out.size()));
        ++calls;
        if (!r.ok() || std::string(out.data(), r.output_size) != in) {
          ++wrong;
          std::fprintf(stderr, "victim: call %lu: %s\n", calls, rfaas::to_string(r.status));
        }
        if (last)
          break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      std::printf("victim: %lu calls, %lu wrong\n", calls, wrong);
      ex.deallocate();
      return wrong == 0 ? 0 : 1;
    }
    if (mode != "attack")
      return usage();
    std::ifstream list(attempts);
    std::string line;
    while (std::getline(list, line)) {
      std::istringstream l(line);
      std::string label, function, argument;
      l >> label >> function;
      std::getline(l >> std::ws, argument);
      if (label.empty())
        continue;
      rfaas::result r =
          ex.execute(function.c_str(), rfaas::const_buffer(argument.data(), argument.size()),
                     rfaas::mutable_buffer(out.data(), out.size()));
      if (r.ok())
        std::printf("%s\t%s\n", label.c_str(), std::string(out.data(), r.output_size).c_str());
      else
        std::printf("%s\terror %s\n", label.c_str(), rfaas::to_string(r.status));
      std::fflush(stdout);
    }
    ex.deallocate();
    return 0;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "escape_client %s: %s\n", mode.c_str(), e.what());
    return 1;
  }
}
