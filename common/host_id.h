// This machine's identity as the node agents and the controller report it: its machine-id and host
// name, "<machine-id>/<hostname>" (containers from one image may share a machine-id, not a host
// name). Workers on one host share its cores and memory; a controller and a worker with the same
// id share a file system, so the controller's checkpoint root is there for the worker.
#pragma once

#include <string>

namespace moe {

std::string ThisHostId();

}  // namespace moe
