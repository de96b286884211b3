#include "common/command_template.hpp"

namespace rfaas::server {

namespace {

void replace_all(std::string &s, const std::string &from, const std::string &to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

} // namespace

std::vector<std::string> expand_command_template(const std::vector<std::string> &tmpl,
                                                 const CommandValues &values) {
  std::vector<std::string> argv;
  for (const std::string &t : tmpl) {
    if (t == "{executor_args}") {
      argv.insert(argv.end(), values.executor_args.begin(), values.executor_args.end());
      continue;
    }
    std::vector<std::string> each;
    auto repeat = [&](const char *placeholder, const std::vector<std::string> &list) {
      for (const std::string &v : list) {
        std::string x = t;
        replace_all(x, placeholder, v);
        each.push_back(std::move(x));
      }
    };
    if (t.find("{host_path}") != std::string::npos)
      repeat("{host_path}", values.host_paths);
    else if (t.find("{code_dir}") != std::string::npos)
      repeat("{code_dir}", values.code_dirs);
    else
      each.push_back(t);
    for (std::string &x : each) {
      for (const auto &v : values.scalars)
        replace_all(x, v.first, v.second);
      argv.push_back(std::move(x));
    }
  }
  return argv;
}

} // namespace rfaas::server
