// Where a job may read and write on a worker: every path a job names (spec.data.path, the
// checkpoint directory) must lie under one of the worker's roots (moe-worker --data-root,
// --checkpoint-root), after ".." and, on the worker, symbolic links are resolved. The controller
// checks the same lexically at submit, when its workers reported their roots.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe {

// `path` made absolute against `base` (when relative), with "." and ".." resolved and repeated '/'
// collapsed, lexically: "/a/b/../c" -> "/a/c". ".." above the root stays at the root.
std::string NormalizeAbsolute(const std::string& path, const std::string& base);

// The normalized path with the symbolic links of its longest existing prefix resolved (realpath),
// the part that does not exist yet appended as it is: where a write would land on this machine.
std::string ResolveOnDisk(const std::string& path);

// Whether `path` is `root` or below it, on component boundaries ("/data2" is not under "/data").
bool IsUnder(const std::string& path, const std::string& root);

// OK when `roots` is empty (nothing is confined) or `path` is under one of them. `resolve`: follow
// symbolic links on this machine (the worker), else lexical only (the controller). The error names
// the field, the path as resolved, the roots and the flag that sets them, e.g.
// "spec.checkpoint.dir: /etc/x is outside this worker's checkpoint roots (/ckpt) (moe-worker
// --checkpoint-root)".
Status CheckUnderRoots(const std::string& field, const std::string& path,
                       const std::vector<std::string>& roots, const std::string& what, bool resolve,
                       const std::string& base);

// Where a relative dataset path lies on this worker: below the first root that holds it (each of
// `roots` in order), else in `cwd` (the directory the worker started in) when that lies below a
// root (a path written against a checkout, "data/fortunes", with --data-root <checkout>/data).
// `holds(candidate)` says whether the dataset is there. Absolute paths come back normalized; empty
// when no candidate holds it.
std::string ResolveRelativeData(const std::string& path, const std::vector<std::string>& roots,
                                const std::string& cwd,
                                const std::function<bool(const std::string&)>& holds);

// The dataset `path` (a prefix: "<path>.idx" is looked for) as a worker and its ranks find it: by
// ResolveRelativeData against `roots` and this process's working directory (a rank inherits its
// agent's, so both find the same files). Empty when it is nowhere here. The spec keeps the path as
// it was written: the agent checks what this finds and the rank opens what this finds.
std::string ResolveDatasetPath(const std::string& path, const std::vector<std::string>& roots);

}  // namespace moe
