// The one machine form of every object moectl prints (-o json, -o yaml, jsonpath, custom-columns,
// watch -o json): field names as the job document spells them (snake_case; the document's own
// apiVersion), zero values kept (rank 0 has its rank), int64s as numbers, enums by name, times as
// RFC 3339 in UTC, floats in their shortest form that reads back as the same double. A field with
// presence that is not set (an optional spec field, a message never filled) is left out: it was
// not given, which is not the same as zero. docs/operations.md, "Machine output".
#pragma once

#include <string>

#include "common/yaml.h"
#include "google/protobuf/message.h"

namespace moe::cli {

Node ObjectNode(const google::protobuf::Message& m);
// "2026-12-03T19:40:01.123Z"; seconds since the epoch, UTC, milliseconds.
std::string Rfc3339(double epoch_seconds);

}  // namespace moe::cli
