#include "worker/engine/model/saved.h"

namespace moe::model {
namespace {
thread_local bool g_grad_enabled = true;
}  // namespace

bool GradEnabled() { return g_grad_enabled; }

NoGradScope::NoGradScope() : previous_(g_grad_enabled) { g_grad_enabled = false; }
NoGradScope::~NoGradScope() { g_grad_enabled = previous_; }

}  // namespace moe::model
