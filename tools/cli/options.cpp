// The one translation unit that includes cxxopts (options.hpp says why).
#include "options.hpp"

#include <typeinfo>

#include <cxxopts.hpp>

namespace rfaas::cli {

namespace {

template <class T> std::shared_ptr<cxxopts::Value> typed(const Value &v) {
  auto out = v.target() ? cxxopts::value<T>(*static_cast<T *>(v.target())) : cxxopts::value<T>();
  if (v.has_default())
    out->default_value(v.default_text());
  return out;
}

std::shared_ptr<cxxopts::Value> to_cxxopts(const Value &v) {
  switch (v.type()) {
  case ValueType::Text:
    return typed<std::string>(v);
  case ValueType::Int:
    return typed<int>(v);
  case ValueType::Uint32:
    return typed<uint32_t>(v);
  case ValueType::Uint64:
    return typed<uint64_t>(v);
  case ValueType::Double:
    return typed<double>(v);
  case ValueType::Bool:
    return typed<bool>(v);
  }
  return typed<std::string>(v);
}

} // namespace

std::shared_ptr<Value> Value::default_value(std::string text) {
  has_default_ = true;
  default_ = std::move(text);
  return shared_from_this();
}

struct Options::Impl {
  Impl(std::string program, std::string description)
      : options(std::move(program), std::move(description)) {}
  cxxopts::Options options;
};

struct ParseResult::Impl {
  cxxopts::ParseResult result;
};

Options::Options(std::string program, std::string description)
    : impl_(std::make_unique<Impl>(std::move(program), std::move(description))) {}
Options::~Options() = default;
Options::Options(Options &&) noexcept = default;
Options &Options::operator=(Options &&) noexcept = default;

Options::Adder Options::add_options(std::string group) { return Adder(*this, std::move(group)); }

Options::Adder &Options::Adder::operator()(const std::string &spec, const std::string &help) {
  try {
    options_.impl_->options.add_options(group_)(spec, help);
  } catch (const cxxopts::exceptions::exception &e) {
    throw OptionError(e.what());
  }
  return *this;
}

Options::Adder &Options::Adder::operator()(const std::string &spec, const std::string &help,
                                           const std::shared_ptr<Value> &value,
                                           const std::string &arg_help) {
  try {
    options_.impl_->options.add_options(group_)(spec, help, to_cxxopts(*value), arg_help);
  } catch (const cxxopts::exceptions::exception &e) {
    throw OptionError(e.what());
  }
  return *this;
}

void Options::custom_help(const std::string &text) { impl_->options.custom_help(text); }
void Options::set_width(size_t width) { impl_->options.set_width(width); }
std::string Options::help() const { return impl_->options.help(); }

ParseResult Options::parse(int argc, const char *const *argv) {
  ParseResult r;
  try {
    r.impl_->result = impl_->options.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception &e) {
    throw OptionError(e.what());
  }
  return r;
}

ParseResult::ParseResult() : impl_(std::make_unique<Impl>()) {}
ParseResult::~ParseResult() = default;
ParseResult::ParseResult(ParseResult &&) noexcept = default;
ParseResult &ParseResult::operator=(ParseResult &&) noexcept = default;

size_t ParseResult::count(const std::string &name) const { return impl_->result.count(name); }

const std::vector<std::string> &ParseResult::unmatched() const noexcept {
  return impl_->result.unmatched();
}

template <class T> T ParseResult::Option::as() const {
  try {
    return result_.impl_->result[name_].as<T>();
  } catch (const cxxopts::exceptions::exception &e) {
    throw OptionError(e.what());
  } catch (const std::bad_cast &) {
    throw OptionError("option '" + name_ + "' is not of the type the program asked for");
  }
}

template std::string ParseResult::Option::as<std::string>() const;
template int ParseResult::Option::as<int>() const;
template uint32_t ParseResult::Option::as<uint32_t>() const;
template uint64_t ParseResult::Option::as<uint64_t>() const;
template double ParseResult::Option::as<double>() const;
template bool ParseResult::Option::as<bool>() const;

} // namespace rfaas::cli
