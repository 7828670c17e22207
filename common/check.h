// MOE_CHECK: invariants that hold unless the code is wrong. On in release builds; a failure prints
// the condition, file:line and the streamed message, then aborts. Input and environment errors are
// never checked this way: they return a Status.
#pragma once

#include <sstream>
#include <string>

namespace moe::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  template <typename T>
  CheckFailure& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  std::ostringstream stream_;
};

// Lets `MOE_CHECK(x) << "..."` be a void expression in both branches of the ternary.
struct Voidify {
  void operator&(const CheckFailure&) {}
};

}  // namespace moe::internal

#define MOE_CHECK(cond) \
  (cond) ? (void)0      \
         : ::moe::internal::Voidify() & ::moe::internal::CheckFailure(__FILE__, __LINE__, #cond)

#define MOE_CHECK_EQ(a, b) MOE_CHECK((a) == (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define MOE_CHECK_LE(a, b) MOE_CHECK((a) <= (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define MOE_CHECK_LT(a, b) MOE_CHECK((a) < (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define MOE_CHECK_GE(a, b) MOE_CHECK((a) >= (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define MOE_CHECK_GT(a, b) MOE_CHECK((a) > (b)) << #a " = " << (a) << ", " #b " = " << (b) << " "
#define MOE_CHECK_OK(expr)                                  \
  do {                                                      \
    auto moe_check_status_ = (expr);                        \
    MOE_CHECK(moe_check_status_.ok()) << moe_check_status_; \
  } while (0)
