#include "common/args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

namespace moe {

ArgParser::ArgParser(std::string program, std::string description)
    : program_(std::move(program)), description_(std::move(description)) {}

void ArgParser::AddString(const std::string& n, std::string* o, const std::string& h) {
  flags_.push_back({n, Type::kString, o, h});
}
void ArgParser::AddInt(const std::string& n, int64_t* o, const std::string& h) {
  flags_.push_back({n, Type::kInt, o, h});
}
void ArgParser::AddDouble(const std::string& n, double* o, const std::string& h) {
  flags_.push_back({n, Type::kDouble, o, h});
}
void ArgParser::AddFlag(const std::string& n, bool* o, const std::string& h) {
  flags_.push_back({n, Type::kFlag, o, h});
}
void ArgParser::AddStrings(const std::string& n, std::vector<std::string>* o,
                           const std::string& h) {
  flags_.push_back({n, Type::kStrings, o, h});
}
void ArgParser::Require(const std::string& n) {
  if (Flag* f = Find(n)) f->required = true;
}

ArgParser::Flag* ArgParser::Find(const std::string& name) {
  for (auto& f : flags_)
    if (f.name == name) return &f;
  return nullptr;
}

bool ArgParser::Given(const std::string& name) const {
  for (const auto& f : flags_)
    if (f.name == name) return f.given;
  return false;
}

Status ArgParser::Parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      help_ = true;
      return OkStatus();
    }
    if (arg.rfind("--", 0) != 0)
      return InvalidArgumentError("unexpected argument '" + arg +
                                  "' (flags start with --; see --help)");
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    Flag* f = Find(name);
    if (f == nullptr) return InvalidArgumentError("unknown flag --" + name + " (see --help)");
    f->given = true;
    if (f->type == Type::kFlag) {
      if (has_value && value != "true" && value != "false")
        return InvalidArgumentError("--" + name + ": expected true or false, got '" + value + "'");
      *static_cast<bool*>(f->out) = !has_value || value == "true";
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) return InvalidArgumentError("--" + name + ": missing value");
      value = argv[++i];
    }
    switch (f->type) {
      case Type::kString:
        *static_cast<std::string*>(f->out) = value;
        break;
      case Type::kStrings:
        static_cast<std::vector<std::string>*>(f->out)->push_back(value);
        break;
      case Type::kInt: {
        char* end = nullptr;
        errno = 0;
        long long v = std::strtoll(value.c_str(), &end, 10);
        if (value.empty() || *end != '\0' || errno == ERANGE)
          return InvalidArgumentError("--" + name + ": expected an integer, got '" + value + "'");
        *static_cast<int64_t*>(f->out) = v;
        break;
      }
      case Type::kDouble: {
        char* end = nullptr;
        double v = std::strtod(value.c_str(), &end);
        if (value.empty() || *end != '\0' || !std::isfinite(v))
          return InvalidArgumentError("--" + name + ": expected a number, got '" + value + "'");
        *static_cast<double*>(f->out) = v;
        break;
      }
      case Type::kFlag:
        break;
    }
  }
  for (const auto& f : flags_) {
    if (f.required && !f.given)
      return InvalidArgumentError("--" + f.name + ": required (see --help)");
  }
  return OkStatus();
}

std::string ArgParser::Usage() const {
  std::ostringstream os;
  os << "usage: " << program_ << " [flags]\n" << description_ << "\n\nflags:\n";
  for (const auto& f : flags_) {
    std::string head = "  --" + f.name;
    switch (f.type) {
      case Type::kString:
      case Type::kStrings:
        head += " STR";
        break;
      case Type::kInt:
        head += " N";
        break;
      case Type::kDouble:
        head += " X";
        break;
      case Type::kFlag:
        break;
    }
    if (head.size() < 30)
      head.resize(30, ' ');
    else
      head += "  ";
    os << head << f.help << (f.required ? " (required)" : "") << "\n";
  }
  return os.str();
}

}  // namespace moe
