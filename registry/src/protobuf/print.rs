//! A compiled `FileDescriptorProto` printed back as .proto text: the text the registry
//! stores, serves and compares. It compiles back to the same descriptor (source
//! positions aside): fields, nested messages and enums in their order, maps, groups,
//! oneofs, proto3 `optional`, extensions, services, reserved names and ranges, and the
//! standard options descriptors carry. Custom options are not kept (prost-types drops
//! them while decoding), nor are comments. Type names are printed fully qualified
//! (`.pkg.Msg`), which every parser resolves the same way.

use std::fmt::Write as _;

use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{
    DescriptorProto, EnumDescriptorProto, FieldDescriptorProto, FileDescriptorProto,
    ServiceDescriptorProto,
};

/// One past the largest field number (`max` in a range).
const FIELD_NUMBER_END: i32 = 536_870_912;

/// The .proto text of `file`.
pub fn file(file: &FileDescriptorProto) -> String {
    let proto3 = file.syntax() == "proto3";
    let mut out = String::new();
    let _ = writeln!(
        out,
        "syntax = \"{}\";",
        if proto3 { "proto3" } else { "proto2" }
    );
    if let Some(package) = &file.package {
        let _ = writeln!(out, "package {package};");
    }
    if !file.dependency.is_empty() {
        out.push('\n');
    }
    for (i, dep) in file.dependency.iter().enumerate() {
        let i = i32::try_from(i).unwrap_or(i32::MAX);
        let kind = if file.public_dependency.contains(&i) {
            "public "
        } else if file.weak_dependency.contains(&i) {
            "weak "
        } else {
            ""
        };
        let _ = writeln!(out, "import {kind}{};", quote(dep));
    }
    let mut options = Vec::new();
    if let Some(o) = &file.options {
        let strings = [
            ("java_package", &o.java_package),
            ("java_outer_classname", &o.java_outer_classname),
            ("go_package", &o.go_package),
            ("objc_class_prefix", &o.objc_class_prefix),
            ("csharp_namespace", &o.csharp_namespace),
            ("swift_prefix", &o.swift_prefix),
            ("php_class_prefix", &o.php_class_prefix),
            ("php_namespace", &o.php_namespace),
            ("php_metadata_namespace", &o.php_metadata_namespace),
            ("ruby_package", &o.ruby_package),
        ];
        for (name, value) in strings {
            if let Some(v) = value {
                options.push(format!("{name} = {}", quote(v)));
            }
        }
        let bools = [
            ("java_multiple_files", o.java_multiple_files),
            // Deprecated, and a no-op in protoc since 2015: kept so it round-trips.
            #[allow(deprecated)]
            (
                "java_generate_equals_and_hash",
                o.java_generate_equals_and_hash,
            ),
            ("cc_generic_services", o.cc_generic_services),
            ("java_generic_services", o.java_generic_services),
            ("py_generic_services", o.py_generic_services),
            ("php_generic_services", o.php_generic_services),
            ("deprecated", o.deprecated),
            ("cc_enable_arenas", o.cc_enable_arenas),
        ];
        push_bools(&mut options, &bools);
        if o.optimize_for.is_some() {
            options.push(format!("optimize_for = {}", o.optimize_for().as_str_name()));
        }
    }
    if !options.is_empty() {
        out.push('\n');
    }
    for o in options {
        let _ = writeln!(out, "option {o};");
    }
    let scope = match &file.package {
        Some(p) => format!(".{p}"),
        None => String::new(),
    };
    let printer = Printer { proto3 };
    let inline = inline_types(&scope, &file.extension, &[]);
    for m in &file.message_type {
        if !inline.contains(&format!("{scope}.{}", m.name())) {
            out.push('\n');
            printer.message(&mut out, m, &scope, 0);
        }
    }
    for e in &file.enum_type {
        out.push('\n');
        printer.enumeration(&mut out, e, 0);
    }
    if !file.extension.is_empty() {
        out.push('\n');
        printer.extensions(&mut out, &file.extension, &file.message_type, &scope, 0);
    }
    for s in &file.service {
        out.push('\n');
        service(&mut out, s);
    }
    out
}

/// The full names of the messages in `scope` that fields print inline: map entries and
/// groups.
fn inline_types(
    scope: &str,
    fields: &[FieldDescriptorProto],
    nested: &[DescriptorProto],
) -> Vec<String> {
    let mut out = Vec::new();
    for f in fields {
        if f.r#type() == Type::Group {
            out.push(f.type_name().to_string());
        }
    }
    for n in nested {
        if n.options.as_ref().is_some_and(|o| o.map_entry()) {
            out.push(format!("{scope}.{}", n.name()));
        }
    }
    out
}

fn push_bools(options: &mut Vec<String>, bools: &[(&str, Option<bool>)]) {
    for (name, value) in bools {
        if let Some(v) = value {
            options.push(format!("{name} = {v}"));
        }
    }
}

fn indent(out: &mut String, level: usize) {
    for _ in 0..level {
        out.push_str("  ");
    }
}

struct Printer {
    proto3: bool,
}

impl Printer {
    /// `message Name { ... }` (a group's body is printed by its field instead).
    fn message(&self, out: &mut String, m: &DescriptorProto, scope: &str, level: usize) {
        indent(out, level);
        let _ = writeln!(out, "message {} {{", m.name());
        self.body(out, m, &format!("{scope}.{}", m.name()), level + 1);
        indent(out, level);
        out.push_str("}\n");
    }

    /// A message's contents. Nested messages and the fields that create nested types
    /// (maps and groups) interleave as declared, so that the nested types compile back
    /// in their order (Confluent's message indexes count them).
    fn body(&self, out: &mut String, m: &DescriptorProto, scope: &str, level: usize) {
        let mut options = Vec::new();
        if let Some(o) = &m.options {
            let bools = [
                ("message_set_wire_format", o.message_set_wire_format),
                (
                    "no_standard_descriptor_accessor",
                    o.no_standard_descriptor_accessor,
                ),
                ("deprecated", o.deprecated),
            ];
            push_bools(&mut options, &bools);
        }
        for o in options {
            indent(out, level);
            let _ = writeln!(out, "option {o};");
        }
        let mut emitted = vec![false; m.field.len()];
        let mut next = 0;
        let inline_ext = inline_types(scope, &m.extension, &[]);
        for n in &m.nested_type {
            let full = format!("{scope}.{}", n.name());
            let creator = m.field.iter().position(|f| {
                f.type_name() == full
                    && (f.r#type() == Type::Group
                        || n.options.as_ref().is_some_and(|o| o.map_entry()))
            });
            if let Some(upto) = creator {
                while next <= upto {
                    self.field_or_oneof(out, m, next, &mut emitted, scope, level);
                    next += 1;
                }
            } else if !inline_ext.contains(&full) {
                self.message(out, n, scope, level);
            }
        }
        while next < m.field.len() {
            self.field_or_oneof(out, m, next, &mut emitted, scope, level);
            next += 1;
        }
        for e in &m.enum_type {
            self.enumeration(out, e, level);
        }
        if !m.extension.is_empty() {
            self.extensions(out, &m.extension, &m.nested_type, scope, level);
        }
        if !m.extension_range.is_empty() {
            let ranges: Vec<String> = m
                .extension_range
                .iter()
                .map(|r| range(r.start(), r.end().saturating_sub(1), FIELD_NUMBER_END - 1))
                .collect();
            indent(out, level);
            let _ = writeln!(out, "extensions {};", ranges.join(", "));
        }
        let ranges: Vec<(i32, i32)> = m
            .reserved_range
            .iter()
            .map(|r| (r.start(), r.end().saturating_sub(1)))
            .collect();
        reserved(out, &ranges, FIELD_NUMBER_END - 1, &m.reserved_name, level);
    }

    /// Field `i`, or the whole oneof it opens; nothing if already printed.
    fn field_or_oneof(
        &self,
        out: &mut String,
        m: &DescriptorProto,
        i: usize,
        emitted: &mut [bool],
        scope: &str,
        level: usize,
    ) {
        if emitted[i] {
            return;
        }
        let f = &m.field[i];
        match f.oneof_index {
            Some(k) if !f.proto3_optional() => {
                let name = usize::try_from(k)
                    .ok()
                    .and_then(|k| m.oneof_decl.get(k))
                    .map_or("", |o| o.name());
                indent(out, level);
                let _ = writeln!(out, "oneof {name} {{");
                for (j, g) in m.field.iter().enumerate().skip(i) {
                    if g.oneof_index == Some(k) && !g.proto3_optional() && !emitted[j] {
                        emitted[j] = true;
                        self.field(out, g, true, &m.nested_type, scope, level + 1);
                    }
                }
                indent(out, level);
                out.push_str("}\n");
            }
            _ => {
                emitted[i] = true;
                self.field(out, f, false, &m.nested_type, scope, level);
            }
        }
    }

    /// Extension fields, in `extend Extendee { ... }` blocks by extendee, in order.
    fn extensions(
        &self,
        out: &mut String,
        fields: &[FieldDescriptorProto],
        siblings: &[DescriptorProto],
        scope: &str,
        level: usize,
    ) {
        let mut i = 0;
        while i < fields.len() {
            let extendee = fields[i].extendee();
            indent(out, level);
            let _ = writeln!(out, "extend {extendee} {{");
            while i < fields.len() && fields[i].extendee() == extendee {
                self.field(out, &fields[i], false, siblings, scope, level + 1);
                i += 1;
            }
            indent(out, level);
            out.push_str("}\n");
        }
    }

    /// One field: label, type, name, number, options; a group with its body.
    fn field(
        &self,
        out: &mut String,
        f: &FieldDescriptorProto,
        in_oneof: bool,
        siblings: &[DescriptorProto],
        scope: &str,
        level: usize,
    ) {
        let entry = siblings
            .iter()
            .find(|n| format!("{scope}.{}", n.name()) == f.type_name());
        let map = entry.filter(|n| n.options.as_ref().is_some_and(|o| o.map_entry()));
        let group = entry.filter(|_| f.r#type() == Type::Group);
        indent(out, level);
        let label = if in_oneof || map.is_some() {
            ""
        } else if f.proto3_optional() {
            "optional "
        } else {
            match f.label() {
                Label::Repeated => "repeated ",
                Label::Required => "required ",
                Label::Optional if self.proto3 => "",
                Label::Optional => "optional ",
            }
        };
        out.push_str(label);
        if let Some(entry) = map {
            let key = entry.field.iter().find(|x| x.number() == 1);
            let value = entry.field.iter().find(|x| x.number() == 2);
            let _ = write!(
                out,
                "map<{}, {}> {}",
                key.map_or(String::new(), type_name),
                value.map_or(String::new(), type_name),
                f.name()
            );
        } else if let Some(g) = group {
            let _ = write!(out, "group {}", g.name());
        } else {
            let _ = write!(out, "{} {}", type_name(f), f.name());
        }
        let _ = write!(out, " = {}", f.number());
        let options = field_options(f);
        if !options.is_empty() {
            let _ = write!(out, " [{}]", options.join(", "));
        }
        match group {
            Some(g) => {
                out.push_str(" {\n");
                self.body(out, g, f.type_name(), level + 1);
                indent(out, level);
                out.push_str("}\n");
            }
            None => out.push_str(";\n"),
        }
    }

    fn enumeration(&self, out: &mut String, e: &EnumDescriptorProto, level: usize) {
        indent(out, level);
        let _ = writeln!(out, "enum {} {{", e.name());
        let mut options = Vec::new();
        if let Some(o) = &e.options {
            push_bools(
                &mut options,
                &[("allow_alias", o.allow_alias), ("deprecated", o.deprecated)],
            );
        }
        for o in options {
            indent(out, level + 1);
            let _ = writeln!(out, "option {o};");
        }
        for v in &e.value {
            indent(out, level + 1);
            let _ = write!(out, "{} = {}", v.name(), v.number());
            if let Some(d) = v.options.as_ref().and_then(|o| o.deprecated) {
                let _ = write!(out, " [deprecated = {d}]");
            }
            out.push_str(";\n");
        }
        let ranges: Vec<(i32, i32)> = e
            .reserved_range
            .iter()
            .map(|r| (r.start(), r.end()))
            .collect();
        reserved(out, &ranges, i32::MAX, &e.reserved_name, level + 1);
        indent(out, level);
        out.push_str("}\n");
    }
}

/// A field's type as written: a scalar's keyword or the full name of its message or
/// enum.
fn type_name(f: &FieldDescriptorProto) -> String {
    match f.r#type() {
        Type::Message | Type::Enum | Type::Group => f.type_name().to_string(),
        Type::Double => "double".into(),
        Type::Float => "float".into(),
        Type::Int64 => "int64".into(),
        Type::Uint64 => "uint64".into(),
        Type::Int32 => "int32".into(),
        Type::Fixed64 => "fixed64".into(),
        Type::Fixed32 => "fixed32".into(),
        Type::Bool => "bool".into(),
        Type::String => "string".into(),
        Type::Bytes => "bytes".into(),
        Type::Uint32 => "uint32".into(),
        Type::Sfixed32 => "sfixed32".into(),
        Type::Sfixed64 => "sfixed64".into(),
        Type::Sint32 => "sint32".into(),
        Type::Sint64 => "sint64".into(),
    }
}

/// The options in a field's brackets: its proto2 default, a json_name other than the
/// one derived from its name, and the standard options set.
fn field_options(f: &FieldDescriptorProto) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(d) = &f.default_value {
        let value = match f.r#type() {
            Type::String => quote(d),
            // Descriptors hold a bytes default C-escaped already.
            Type::Bytes => format!("\"{d}\""),
            _ => d.clone(),
        };
        out.push(format!("default = {value}"));
    }
    if let Some(json) = &f.json_name
        && *json != default_json_name(f.name())
    {
        out.push(format!("json_name = {}", quote(json)));
    }
    if let Some(o) = &f.options {
        if o.ctype.is_some() {
            out.push(format!("ctype = {}", o.ctype().as_str_name()));
        }
        if o.jstype.is_some() {
            out.push(format!("jstype = {}", o.jstype().as_str_name()));
        }
        push_bools(
            &mut out,
            &[
                ("packed", o.packed),
                ("lazy", o.lazy),
                ("deprecated", o.deprecated),
                ("weak", o.weak),
            ],
        );
    }
    out
}

/// protoc's JSON name: underscores dropped, the letter after each capitalised.
pub(super) fn default_json_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.push(c.to_ascii_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

fn service(out: &mut String, s: &ServiceDescriptorProto) {
    let _ = writeln!(out, "service {} {{", s.name());
    if let Some(d) = s.options.as_ref().and_then(|o| o.deprecated) {
        let _ = writeln!(out, "  option deprecated = {d};");
    }
    for m in &s.method {
        let stream = |yes: bool| if yes { "stream " } else { "" };
        let _ = write!(
            out,
            "  rpc {}({}{}) returns ({}{})",
            m.name(),
            stream(m.client_streaming()),
            m.input_type(),
            stream(m.server_streaming()),
            m.output_type()
        );
        let mut options = Vec::new();
        if let Some(o) = &m.options {
            push_bools(&mut options, &[("deprecated", o.deprecated)]);
            if o.idempotency_level.is_some() {
                options.push(format!(
                    "idempotency_level = {}",
                    o.idempotency_level().as_str_name()
                ));
            }
        }
        if options.is_empty() {
            out.push_str(";\n");
        } else {
            out.push_str(" {\n");
            for o in options {
                let _ = writeln!(out, "    option {o};");
            }
            out.push_str("  }\n");
        }
    }
    out.push_str("}\n");
}

/// `reserved` lines: inclusive ranges (`max` for the largest value), then names.
fn reserved(out: &mut String, ranges: &[(i32, i32)], max: i32, names: &[String], level: usize) {
    if !ranges.is_empty() {
        let ranges: Vec<String> = ranges.iter().map(|&(a, b)| range(a, b, max)).collect();
        indent(out, level);
        let _ = writeln!(out, "reserved {};", ranges.join(", "));
    }
    if !names.is_empty() {
        let names: Vec<String> = names.iter().map(|n| quote(n)).collect();
        indent(out, level);
        let _ = writeln!(out, "reserved {};", names.join(", "));
    }
}

fn range(start: i32, end: i32, max: i32) -> String {
    if start == end {
        start.to_string()
    } else if end == max {
        format!("{start} to max")
    } else {
        format!("{start} to {end}")
    }
}

/// A .proto string literal.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "\\{b:03o}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
