// kubectl's -o jsonpath= and -o custom-columns= over moectl's object form (cli/object_form.h).
//
// Templates: text outside braces is printed as it is; inside braces, a path (`.state`,
// `.placement[0].worker`, `.jobs[*].id`, `..step`, `.placement[-1]`, `.jobs[0:2]`,
// `.jobs[?(@.state=="RUNNING")].id`, `['key with dots']`; `$` is the object, `@` the current
// element), a string literal (`{"\n"}`), or `range PATH` ... `end`. Several results of one path are
// joined by a space; strings print bare, objects and lists as JSON; a missing key prints nothing
// (kubectl's default). A template that does not parse is refused with the place it stops.
#pragma once

#include <string>
#include <vector>

#include "cli/format.h"
#include "common/status.h"
#include "common/yaml.h"

namespace moe::cli {

StatusOr<std::string> JsonPath(const std::string& tmpl, const Node& root);

// custom-columns=NAME:PATH,NAME:PATH (PATH with or without braces): one row per element of
// `items` (each list element, or the object itself when `items` is not a list), `<none>` where a
// path finds nothing. The columns are kubectl's: NAME:PATH pairs split at top-level commas.
StatusOr<TableRows> CustomColumns(const std::string& spec, const Node& items);

}  // namespace moe::cli
