#!/usr/bin/python3
"""The job spec's C++ form, generated from its one definition, moe/v1/job_spec.proto.

  gen_job_spec.py --descriptors FILE --python-out DIR --out-dir DIR

FILE is `protoc --include_imports --include_source_info --descriptor_set_out` of job_spec.proto;
DIR (--python-out) holds `protoc --python_out` of moe/v1/options.proto (the (spec) and (cpp_struct)
options). Writes into --out-dir:
  job_spec_structs.gen.h  a plain struct per message (the engine's form: no protobuf), members in the
                          message's declaration order with their defaults and comments; a section
                          field's message (metadata, spec) adds its members to the enclosing struct;
                          each struct takes its hand-written methods from common/job_spec_methods.inc
  job_spec_tables.gen.cc  each struct's field table (common/schema.h): key, member, checks, in the
                          same order (the order documents are read and written in)
Errors name the message and field and exit 1. Needs /usr/bin/python3 with python3-protobuf.
"""
import argparse
import os
import sys

# Proto types and their C++ members.
SCALARS = {
    'TYPE_INT64': 'int64_t',
    'TYPE_UINT64': 'uint64_t',
    'TYPE_DOUBLE': 'double',
    'TYPE_BOOL': 'bool',
    'TYPE_STRING': 'std::string',
}
ZERO = {'int64_t': '0', 'uint64_t': '0', 'double': '0', 'bool': 'false'}


class SpecError(Exception):
    pass


def load(descriptors, python_out):
    sys.path.insert(0, python_out)
    try:
        from google.protobuf import descriptor_pb2
        from moe.v1 import options_pb2  # registers the options' extensions before parsing
    except ImportError as e:
        raise SpecError(f'{e}: needs python3-protobuf (scripts/install-deps.sh build) and '
                        f'options_pb2 in {python_out}')
    with open(descriptors, 'rb') as f:
        fds = descriptor_pb2.FileDescriptorSet.FromString(f.read())
    spec_file = next((f for f in fds.file if f.name == 'moe/v1/job_spec.proto'), None)
    if spec_file is None:
        raise SpecError(f'{descriptors} holds no moe/v1/job_spec.proto')
    return spec_file, options_pb2, descriptor_pb2


def comments(spec_file):
    """(message index, field index or None) -> the leading comment's lines."""
    out = {}
    for loc in spec_file.source_code_info.location:
        p = list(loc.path)
        text = loc.leading_comments or ''
        if not text:
            continue
        lines = [l[1:] if l.startswith(' ') else l for l in text.rstrip('\n').split('\n')]
        if len(p) == 2 and p[0] == 4:  # message_type[i]
            out[(p[1], None)] = lines
        elif len(p) == 4 and p[0] == 4 and p[2] == 2:  # message_type[i].field[j]
            out[(p[1], p[3])] = lines
    return out


class Model:
    """The messages of job_spec.proto as structs, fields and sections."""

    def __init__(self, spec_file, options_pb2, descriptor_pb2):
        self.opts, self.dpb = options_pb2, descriptor_pb2
        self.comments = comments(spec_file)
        self.messages = {}  # full name -> (index, DescriptorProto)
        for i, m in enumerate(spec_file.message_type):
            self.messages['.moe.v1.' + m.name] = (i, m)
            for nested in m.nested_type:  # map<string, string>'s entry
                if not nested.options.map_entry:
                    raise SpecError(f'{m.name}.{nested.name}: nested messages are not supported')
                self.messages[f'.moe.v1.{m.name}.{nested.name}'] = (None, nested)
        self.sections = set()  # full names of messages used as sections
        for _, m in self.messages.values():
            for f in m.field:
                if self.spec(f).section:
                    self.sections.add(f.type_name)

    def spec(self, field):
        return field.options.Extensions[self.opts.spec]

    def struct_name(self, message):
        name = message.options.Extensions[self.opts.cpp_struct]
        return name or message.name

    def member_type(self, where, field):
        if field.type == self.dpb.FieldDescriptorProto.TYPE_MESSAGE:
            if field.type_name not in self.messages:
                raise SpecError(f'{where}: type {field.type_name} is not in job_spec.proto')
            _, msg = self.messages[field.type_name]
            if msg.options.map_entry:
                return 'std::map<std::string, std::string>'
            inner = self.struct_name(msg)
        else:
            type_name = self.dpb.FieldDescriptorProto.Type.Name(field.type)
            if type_name not in SCALARS:
                raise SpecError(f'{where}: type {type_name} has no C++ form here (use int64, uint64, '
                                f'double, bool, string or a message)')
            inner = SCALARS[type_name]
        if field.label == self.dpb.FieldDescriptorProto.LABEL_REPEATED:
            return f'std::vector<{inner}>'
        return f'std::optional<{inner}>' if self.spec(field).presence else inner

    def members(self, message):
        """(message index, field, member type) for every member the message's struct holds."""
        index, _ = self.messages['.moe.v1.' + message.name]
        out = []
        for j, f in enumerate(message.field):
            where = f'{message.name}.{f.name}'
            if self.spec(f).section:
                _, section = self.messages[f.type_name]
                out.extend(self.members(section))
                continue
            out.append((index, j, f, self.member_type(where, f)))
        return out

    def structs(self):
        """The messages that become structs, each after the structs its members use."""
        done, order = set(), []

        def visit(full):
            if full in done:
                return
            done.add(full)
            _, m = self.messages[full]
            for f in m.field:
                if f.type_name in self.messages and not self.messages[f.type_name][1].options.map_entry:
                    visit(f.type_name)
            if full not in self.sections and not m.options.map_entry:
                order.append(m)

        for full, (index, _) in self.messages.items():
            if index is not None:
                visit(full)
        return order


def cpp_string(text):
    return '"' + text.replace('\\', '\\\\').replace('"', '\\"') + '"'


def default_of(where, spec, member_type):
    if spec.presence:
        if spec.default:
            raise SpecError(f'{where}: a field with presence has no default (absent stays absent)')
        return ''
    if spec.default:
        if member_type == 'std::string':
            return ' = ' + cpp_string(spec.default)
        if member_type not in ZERO:
            raise SpecError(f'{where}: a default for a {member_type} member is not supported')
        return ' = ' + spec.default
    return ' = ' + ZERO[member_type] if member_type in ZERO else ''


def header(model):
    out = ['// Generated from moe/v1/job_spec.proto by proto/gen_job_spec.py: edit those, not this.',
           '// The job spec as plain structs (no protobuf): common/job_spec_types.h includes it.',
           '#pragma once', '', '#include <cstdint>', '#include <map>', '#include <optional>',
           '#include <string>', '#include <vector>', '', 'namespace moe {']
    for m in model.structs():
        name = model.struct_name(m)
        index, _ = model.messages['.moe.v1.' + m.name]
        out.append('')
        out += ['// ' + l if l else '//' for l in model.comments.get((index, None), [])]
        out.append(f'struct {name} {{')
        for mi, fi, f, t in model.members(m):
            where = f'{m.name}.{f.name}'
            out += ['  // ' + l if l else '  //' for l in model.comments.get((mi, fi), [])]
            out.append(f'  {t} {f.name}{default_of(where, model.spec(f), t)};')
        out += ['', f'#define MOE_JOB_SPEC_METHODS_{name}', '#include "common/job_spec_methods.inc"',
                f'#undef MOE_JOB_SPEC_METHODS_{name}',
                f'  bool operator==(const {name}&) const = default;', '};']
    out += ['', '}  // namespace moe', '']
    return '\n'.join(out)


def table(model):
    out = ['// Generated from moe/v1/job_spec.proto by proto/gen_job_spec.py: edit those, not this.',
           '// Each spec struct\'s field table (common/schema.h).',
           '#include "common/job_spec_checks.h"', '#include "common/job_spec_schema.h"', '',
           'namespace moe {', '', '// clang-format off']
    for m in model.structs():
        name = model.struct_name(m)
        out += ['template <>', f'const Schema<{name}>& SchemaOf<{name}>() {{', f'  using S = {name};',
                f'  static const auto* schema = new Schema<S>("{name}", {{']
        out += rows(model, m, '      ')
        out += ['  });', '  return *schema;', '}', '']
    out += ['// clang-format on', '', '}  // namespace moe', '']
    return '\n'.join(out)


def rows(model, message, indent):
    out = []
    for f in message.field:
        spec = model.spec(f)
        key = spec.key or f.name
        if spec.key and spec.key != f.json_name:
            raise SpecError(f'{message.name}.{f.name}: (spec).key {spec.key} but json_name '
                            f'{f.json_name}: the JSON mapping and the document must agree')
        if spec.section:
            _, section = model.messages[f.type_name]
            out.append(f'{indent}Section<S>({cpp_string(key)}, {{')
            out += rows(model, section, indent + '    ')
            required = f'.Required({cpp_string(spec.required)})' if spec.required else ''
            out.append(f'{indent}}}){required},')
            continue
        args = [cpp_string(key), f'&S::{f.name}'] + list(spec.check)
        line = f'{indent}Field({", ".join(args)})'
        if spec.after_read:
            line += f'.AfterRead({spec.after_read})'
        if spec.required:
            line += f'.Required({cpp_string(spec.required)})'
        out.append(line + ',')
    return out


def write_if_changed(path, text):
    """Unchanged output keeps its time stamp: nothing that includes it rebuilds."""
    if os.path.exists(path):
        with open(path) as f:
            if f.read() == text:
                return
    with open(path + '.tmp', 'w') as f:
        f.write(text)
    os.replace(path + '.tmp', path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--descriptors', required=True)
    ap.add_argument('--python-out', required=True)
    ap.add_argument('--out-dir', required=True)
    a = ap.parse_args()
    try:
        model = Model(*load(a.descriptors, a.python_out))
        h, cc = header(model), table(model)
    except SpecError as e:
        print(f'gen_job_spec.py: moe/v1/job_spec.proto: {e}', file=sys.stderr)
        return 1
    os.makedirs(a.out_dir, exist_ok=True)
    write_if_changed(os.path.join(a.out_dir, 'job_spec_structs.gen.h'), h)
    write_if_changed(os.path.join(a.out_dir, 'job_spec_tables.gen.cc'), cc)
    return 0


if __name__ == '__main__':
    sys.exit(main())
