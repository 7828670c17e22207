#!/usr/bin/python3
"""The job spec's C++ form, generated from its one definition, moe/v1/job_spec.proto.

  gen_job_spec.py --proto proto/moe/v1/job_spec.proto --out-dir DIR

Writes into DIR:
  job_spec_structs.gen.h  a plain struct per message (the engine's form: no protobuf), members in the
                          message's declaration order with their defaults and leading comments; a
                          section field's message (metadata, spec) adds its members to the enclosing
                          struct; each struct takes its hand-written methods from
                          common/job_spec_methods.inc
  job_spec_tables.gen.cc  each struct's field table (common/schema.h): key, member, checks, in the
                          same order (the order documents are read and written in)
  job_spec_proto.gen.cc   the structs to and from moe.v1.TrainingJob directly, field by field
                          (common/job_spec_proto.h's WriteSpecProto and ReadSpecProto: what the
                          controller does on every submit, without a document tree between); the
                          reader does what the table's reader does with a document (the same field
                          order, presets applied after their field, sections required, non-finite
                          numbers refused, the same paths in its errors); job_spec_proto_test
                          compares both ways with the tree's on random messages

It reads the .proto itself (python3 alone, no protoc: the core builds where only a compiler, CMake,
Python and the CUDA toolkit are, as on the GPU machine), in the one layout job_spec.proto keeps: a
field a line, its options on that line; anything else is refused, naming the line.
job_spec_schema_test compares the generated tables with protoc's own descriptors of the file, so a
misreading here fails there. Errors name the message and field and exit 1.
"""
import argparse
import os
import re
import sys

# Proto types and their C++ members.
SCALARS = {
    'int64': 'int64_t',
    'uint64': 'uint64_t',
    'double': 'double',
    'bool': 'bool',
    'string': 'std::string',
}
ZERO = {'int64_t': '0', 'uint64_t': '0', 'double': '0', 'bool': 'false'}
MAP = 'map<string, string>'
SPEC_KEYS = {'default', 'check', 'after_read', 'required', 'section', 'presence', 'key'}

FIELD = re.compile(r'^(optional |repeated )?(map<string, string>|\w+) (\w+) = (\d+)'
                   r'(?: \[(.*)\])?;\s*(?://.*)?$')


class SpecError(Exception):
    pass


class Spec:
    """A field's (moe.v1.spec) option, as options.proto's SpecField."""

    def __init__(self):
        self.default = self.after_read = self.required = self.key = ''
        self.check = []
        self.section = self.presence = False


class Field:
    def __init__(self, label, type_name, name, number, json_name, spec, comment):
        self.label, self.type_name, self.name, self.number = label, type_name, name, number
        self.json_name, self.spec, self.comment = json_name, spec, comment


class Message:
    def __init__(self, name, comment):
        self.name, self.comment, self.cpp_struct, self.fields = name, comment, '', []


def split_top(text, sep):
    """`text` split at `sep` outside quotes, braces and brackets."""
    out, depth, cur, quote = [], 0, '', None
    for ch in text:
        if quote:
            quote = None if ch == quote and not cur.endswith('\\') else quote
        elif ch in '"\'':
            quote = ch
        elif ch in '{[(':
            depth += 1
        elif ch in '}])':
            depth -= 1
        elif ch == sep and depth == 0:
            out.append(cur.strip())
            cur = ''
            continue
        cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def unquote(where, text):
    if len(text) < 2 or text[0] not in '"\'' or text[-1] != text[0]:
        raise SpecError(f'{where}: expected a quoted string, got {text}')
    return re.sub(r'\\(.)', r'\1', text[1:-1])


def parse_spec(where, text):
    """`{default: "8", check: "Positive()", presence: true}` -> Spec."""
    if not (text.startswith('{') and text.endswith('}')):
        raise SpecError(f'{where}: (spec) = {{...}} expected, got {text}')
    spec = Spec()
    for item in split_top(text[1:-1], ','):
        key, _, value = item.partition(':')
        key, value = key.strip(), value.strip()
        if key not in SPEC_KEYS:
            raise SpecError(f'{where}: (spec) has no {key!r} (known: {", ".join(sorted(SPEC_KEYS))})')
        if key in ('section', 'presence'):
            if value not in ('true', 'false'):
                raise SpecError(f'{where}: (spec).{key}: true or false, got {value}')
            setattr(spec, key, value == 'true')
        elif key == 'check':
            spec.check.append(unquote(where, value))
        else:
            setattr(spec, key, unquote(where, value))
    return spec


def parse_field(where, match, comment):
    label, type_name, name, number, options, = match.groups()
    json_name, spec = '', Spec()
    for opt in split_top(options or '', ','):
        key, _, value = opt.partition('=')
        key, value = key.strip(), value.strip()
        if key == 'json_name':
            json_name = unquote(where, value)
        elif key in ('(spec)', '(moe.v1.spec)'):
            spec = parse_spec(where, value)
        else:
            raise SpecError(f'{where}: option {key} is not one this generator reads')
    return Field((label or '').strip(), type_name, name, int(number), json_name, spec, comment)


def parse(path):
    """The messages of the .proto, in order, with their leading comments."""
    messages, comment, current = [], [], None
    with open(path) as f:
        lines = f.read().split('\n')
    for n, raw in enumerate(lines, 1):
        line, where = raw.strip(), f'{os.path.basename(path)}:{n}'
        if line.startswith('//'):
            comment.append(line[3:] if line.startswith('// ') else line[2:])
            continue
        if not line or re.match(r'^(syntax|package|import) ', line):
            comment = []
            continue
        if current is None:
            m = re.match(r'^message (\w+) \{$', line)
            if not m:
                raise SpecError(f'{where}: expected a message, got: {line}')
            current = Message(m.group(1), comment)
        elif line == '}':
            messages.append(current)
            current = None
        elif m := re.match(r'^option \((?:moe\.v1\.)?cpp_struct\) = "(\w+)";$', line):
            current.cpp_struct = m.group(1)
        elif m := FIELD.match(line):
            current.fields.append(parse_field(f'{where} ({current.name})', m, comment))
        else:
            raise SpecError(f'{where}: not a field this generator reads (a field a line, its '
                            f'options on it): {line}')
        comment = []
    if current is not None:
        raise SpecError(f'{path}: message {current.name} is not closed')
    return messages


class Model:
    """The messages of job_spec.proto as structs, fields and sections."""

    def __init__(self, messages):
        self.messages = {m.name: m for m in messages}
        self.sections = {f.type_name for m in messages for f in m.fields if f.spec.section}

    def struct_name(self, message):
        return message.cpp_struct or message.name

    def member_type(self, where, field):
        if field.type_name == MAP:
            if field.label:
                raise SpecError(f'{where}: a map takes no label')
            return 'std::map<std::string, std::string>'
        if field.type_name in SCALARS:
            inner = SCALARS[field.type_name]
        elif field.type_name in self.messages:
            inner = self.struct_name(self.messages[field.type_name])
        else:
            raise SpecError(f'{where}: type {field.type_name} has no C++ form here (int64, uint64, '
                            f'double, bool, string, map<string, string> or a message of this file)')
        if field.label == 'repeated':
            return f'std::vector<{inner}>'
        return f'std::optional<{inner}>' if field.spec.presence else inner

    def members(self, message):
        """(field, member type) for every member the message's struct holds."""
        out = []
        for f in message.fields:
            if f.spec.section:
                out.extend(self.members(self.messages[f.type_name]))
                continue
            out.append((f, self.member_type(f'{message.name}.{f.name}', f)))
        return out

    def structs(self):
        """The messages that become structs, each after the structs its members use."""
        done, order = set(), []

        def visit(name):
            if name in done:
                return
            done.add(name)
            for f in self.messages[name].fields:
                if f.type_name in self.messages:
                    visit(f.type_name)
            if name not in self.sections:
                order.append(self.messages[name])

        for name in self.messages:
            visit(name)
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
        out.append('')
        out += ['// ' + l if l else '//' for l in m.comment]
        out.append(f'struct {name} {{')
        for f, t in model.members(m):
            where = f'{m.name}.{f.name}'
            out += ['  // ' + l if l else '  //' for l in f.comment]
            out.append(f'  {t} {f.name}{default_of(where, f.spec, t)};')
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
    for f in message.fields:
        spec = f.spec
        key = spec.key or f.name
        if spec.key != f.json_name:
            raise SpecError(f'{message.name}.{f.name}: (spec).key {spec.key!r} but json_name '
                            f'{f.json_name!r}: the JSON mapping and the document must agree')
        if spec.section:
            section = model.messages[f.type_name]
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


def proto_type(message):
    return f'moe::v1::{message.name}'


def field_kind(model, where, f):
    """One of: map, repeated_message, repeated_scalar, section, message, scalar."""
    if f.type_name == MAP:
        return 'map'
    is_message = f.type_name in model.messages
    if f.label == 'repeated':
        return 'repeated_message' if is_message else 'repeated_scalar'
    if f.spec.section:
        return 'section'
    if is_message:
        return 'message'
    if f.label != 'optional':
        raise SpecError(f'{where}: a scalar field must be optional (its presence is what the '
                        f'document had)')
    return 'scalar'


def write_lines(model, message):
    """The body of WriteFields(const S& s, moe::v1::<message>* m)."""
    out = []
    for f in message.fields:
        kind, n = field_kind(model, f'{message.name}.{f.name}', f), f.name
        if kind == 'map':
            out.append(f'  for (const auto& [k, v] : s.{n}) (*m->mutable_{n}())[k] = v;')
        elif kind == 'repeated_scalar':
            out.append(f'  for (const auto& x : s.{n}) m->add_{n}(x);')
        elif kind == 'repeated_message':
            out.append(f'  for (const auto& x : s.{n}) WriteFields(x, m->add_{n}());')
        elif kind == 'section':
            out.append(f'  WriteFields(s, m->mutable_{n}());')
        elif kind == 'message':
            if f.spec.presence:
                out.append(f'  if (s.{n}) WriteFields(*s.{n}, m->mutable_{n}());')
            else:
                out.append(f'  WriteFields(s.{n}, m->mutable_{n}());')
        elif f.spec.presence:
            out.append(f'  if (s.{n}) m->set_{n}(*s.{n});')
        else:
            out.append(f'  m->set_{n}(s.{n});')
    return out


def read_field(model, message, f):
    """The lines of ReadFields that read field `f` of moe::v1::<message> into the struct `s`."""
    kind, n = field_kind(model, f'{message.name}.{f.name}', f), f.name
    if kind in ('map', 'repeated_scalar', 'repeated_message', 'section') and f.spec.after_read:
        raise SpecError(f'{message.name}.{f.name}: after_read on a {kind.replace("_", " ")} has no '
                        f'direct reader here (job_spec_proto.gen.cc)')
    if kind in ('map', 'repeated_scalar', 'repeated_message') and f.spec.required:
        raise SpecError(f'{message.name}.{f.name}: required on a {kind.replace("_", " ")} has no '
                        f'direct reader here (job_spec_proto.gen.cc)')
    key = cpp_string(f.spec.key or f.name)
    at = f'Join(path, {key})'
    if kind == 'map':
        return [f'  if (!m.{n}().empty()) s->{n} = {{m.{n}().begin(), m.{n}().end()}};']
    if kind == 'repeated_scalar':
        if f.type_name == 'double':
            return [f'  for (int i = 0; i < m.{n}_size(); ++i)',
                    f'    MOE_RETURN_IF_ERROR(Finite(m.{n}(i), Index({at}, i)));',
                    f'  if (m.{n}_size() > 0) s->{n}.assign(m.{n}().begin(), m.{n}().end());']
        return [f'  if (m.{n}_size() > 0) s->{n}.assign(m.{n}().begin(), m.{n}().end());']
    if kind == 'repeated_message':
        return [f'  if (m.{n}_size() > 0) {{',
                f'    decltype(s->{n}) v(static_cast<size_t>(m.{n}_size()));',
                f'    for (int i = 0; i < m.{n}_size(); ++i)',
                f'      MOE_RETURN_IF_ERROR(ReadFields(m.{n}(i), Index({at}, i), &v[static_cast<size_t>(i)]));',
                f'    s->{n} = std::move(v);', '  }']
    if kind == 'section':
        out = [f'  if (m.has_{n}()) {{', f'    MOE_RETURN_IF_ERROR(ReadFields(m.{n}(), {at}, s));']
        if f.spec.required:
            out += ['  } else {', f'    return Missing({at}, {cpp_string(f.spec.required)});']
        return out + ['  }']
    if kind == 'message':
        target = f'&s->{n}'
        out = [f'  if (m.has_{n}()) {{']
        if f.spec.presence:
            out.append(f'    if (!s->{n}) s->{n}.emplace();  // read over what a preset set, as the table does')
            target = f'&*s->{n}'
        out.append(f'    MOE_RETURN_IF_ERROR(ReadFields(m.{n}(), {at}, {target}));')
    else:
        value = f'm.{n}()'
        out = [f'  if (m.has_{n}()) {{']
        if f.type_name == 'double':
            out.append(f'    MOE_RETURN_IF_ERROR(Finite({value}, {at}));')
        out.append(f'    s->{n} = {value};')
    if f.spec.after_read:
        out.append(f'    if (Status st = {f.spec.after_read}(s); !st.ok()) return st.WithPrefix({at}.str());')
    if f.spec.required:
        out += ['  } else {', f'    return Missing({at}, {cpp_string(f.spec.required)});']
    return out + ['  }']


def direct(model):
    """job_spec_proto.gen.cc: WriteFields/ReadFields per message, and the two entry points."""
    out = ['// Generated from moe/v1/job_spec.proto by proto/gen_job_spec.py: edit those, not this.',
           '// The job spec\'s structs to and from moe.v1.TrainingJob, field by field.',
           '#include "common/job_spec_checks.h"', '#include "common/job_spec_proto.h"',
           '#include "common/job_spec_proto_direct.h"', '',
           'namespace moe {', 'namespace {', '', 'using namespace job_spec_proto_direct;', '',
           '// clang-format off']
    sig = []
    for m in model.messages.values():
        struct = model.struct_name(model.messages['TrainingJob']) if m.name in model.sections \
            else model.struct_name(m)
        sig.append((m, struct))
        out.append(f'void WriteFields(const {struct}& s, {proto_type(m)}* m);')
        out.append(f'Status ReadFields(const {proto_type(m)}& m, const Path& path, {struct}* s);')
    for m, struct in sig:
        body = write_lines(model, m)
        out += ['', f'void WriteFields(const {struct}& s, {proto_type(m)}* m) {{']
        out += body if body else ['  (void)s;', '  (void)m;']
        out += ['}', '', f'Status ReadFields(const {proto_type(m)}& m, const Path& path, {struct}* s) {{']
        for f in m.fields:
            out += read_field(model, m, f)
        out += ['  return OkStatus();', '}']
    root = model.messages['TrainingJob']
    out += ['// clang-format on', '', '}  // namespace', '',
            f'void WriteSpecProto(const {model.struct_name(root)}& spec, moe::v1::TrainingJob* out) {{',
            '  WriteFields(spec, out);', '}', '',
            f'Status ReadSpecProto(const moe::v1::TrainingJob& job, {model.struct_name(root)}* out) {{',
            '  return ReadFields(job, Path{}, out);', '}', '', '}  // namespace moe', '']
    return '\n'.join(out)


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
    ap.add_argument('--proto', required=True)
    ap.add_argument('--out-dir', required=True)
    a = ap.parse_args()
    try:
        model = Model(parse(a.proto))
        h, cc, proto_cc = header(model), table(model), direct(model)
    except SpecError as e:
        print(f'gen_job_spec.py: moe/v1/job_spec.proto: {e}', file=sys.stderr)
        return 1
    os.makedirs(a.out_dir, exist_ok=True)
    write_if_changed(os.path.join(a.out_dir, 'job_spec_structs.gen.h'), h)
    write_if_changed(os.path.join(a.out_dir, 'job_spec_tables.gen.cc'), cc)
    write_if_changed(os.path.join(a.out_dir, 'job_spec_proto.gen.cc'), proto_cc)
    return 0


if __name__ == '__main__':
    sys.exit(main())
