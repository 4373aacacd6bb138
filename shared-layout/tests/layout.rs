//! Compiles a C program against the real `include/pfprof.h` and checks that
//! every size, field offset, constant and ioctl number agrees with `abi.rs`.
#![cfg(not(loom))]

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

use shared_layout::abi::{
    self, AddCgroup, AddProcess, AreaHeader, Attribute, FaultRecord, FaultsHeader, Follow, Info,
    Sample, Sem,
};

/// One fact as both sides see it: a name, the printf conversion and argument
/// that print it in C, and the Rust value.
struct Fact {
    name: String,
    c_format: &'static str,
    c_arg: String,
    rust: String,
}

impl Fact {
    fn number(name: String, c_expr: &str, rust: impl ToString) -> Fact {
        Fact {
            name,
            c_format: "%llu",
            c_arg: format!("(unsigned long long)({c_expr})"),
            rust: rust.to_string(),
        }
    }
}

fn size_of_pointee<T>(_: *const T) -> usize {
    size_of::<T>()
}

/// Offset and size of every listed field, the struct's size, and the sum of
/// the fields' sizes (equal to the size only if no field is missing).
macro_rules! struct_facts {
    ($facts:ident, $rust:ty, $c:literal, [$($field:ident),* $(,)?]) => {{
        let c_struct = concat!("struct ", $c);
        $facts.push(Fact::number(
            format!("sizeof({c_struct})"),
            &format!("sizeof({c_struct})"),
            size_of::<$rust>(),
        ));
        let mut field_sum = 0usize;
        let mut c_sum = String::from("0");
        $(
            let value = std::mem::MaybeUninit::<$rust>::uninit();
            // SAFETY: `&raw const` takes the field's address in a live
            // allocation without reading it; only its type is used.
            let size = size_of_pointee(unsafe { &raw const (*value.as_ptr()).$field });
            field_sum += size;
            let field = stringify!($field);
            let member = format!("(({c_struct} *)0)->{field}");
            c_sum.push_str(&format!(" + sizeof({member})"));
            $facts.push(Fact::number(
                format!("offsetof({c_struct}, {field})"),
                &format!("offsetof({c_struct}, {field})"),
                offset_of!($rust, $field),
            ));
            $facts.push(Fact::number(
                format!("sizeof({c_struct}.{field})"),
                &format!("sizeof({member})"),
                size,
            ));
        )*
        $facts.push(Fact::number(format!("field sizes of {c_struct}"), &c_sum, field_sum));
    }};
}

fn number(facts: &mut Vec<Fact>, c: &str, rust: impl ToString) {
    facts.push(Fact::number(c.to_owned(), c, rust));
}

fn string(facts: &mut Vec<Fact>, c: &str, rust: &str) {
    facts.push(Fact {
        name: c.to_owned(),
        c_format: "%s",
        c_arg: c.to_owned(),
        rust: rust.to_owned(),
    });
}

fn facts() -> Vec<Fact> {
    let mut f = Vec::new();
    struct_facts!(
        f,
        Sample,
        "pfprof_sample",
        [time_ns, minor, major, cpu_ns, rss_anon, rss_file, rss_shmem, swap]
    );
    struct_facts!(f, Sem, "pfprof_sem", [count, waiters]);
    struct_facts!(
        f,
        AreaHeader,
        "pfprof_area",
        [
            magic,
            abi_version,
            mode,
            sample_size,
            area_size,
            data_offset,
            slot_count,
            period_ns,
            reserved0,
            write_seq,
            overwritten,
            blocked_ns,
            deferred,
            canceled,
            withdrawn,
            reserved2,
            read_seq,
            reserved3,
            lock,
            reserved4,
            full,
            reserved5,
            empty,
            reserved6,
        ]
    );
    struct_facts!(
        f,
        Info,
        "pfprof_info",
        [
            abi_version,
            flags,
            area_size,
            slot_count,
            sample_size,
            reserved0,
            period_ns,
            faults_offset,
            faults_size,
            reserved,
        ]
    );
    struct_facts!(
        f,
        FaultRecord,
        "pfprof_fault",
        [time_ns, address, pid, kind, ip]
    );
    struct_facts!(
        f,
        FaultsHeader,
        "pfprof_faults_area",
        [
            magic,
            record_size,
            region_size,
            data_offset,
            record_count,
            minor_sampling,
            reserved0,
            claimed_seq,
            reserved1,
            write_seq,
            written_major,
            written_minor,
            dropped_major,
            dropped_minor,
            unattributed,
            reserved2,
            reserved3,
        ]
    );
    struct_facts!(
        f,
        Attribute,
        "pfprof_attribution",
        [minor_sampling, flags, reserved]
    );
    struct_facts!(f, AddProcess, "pfprof_target", [pid, flags, reserved]);
    struct_facts!(f, AddCgroup, "pfprof_cgroup_target", [fd, flags, reserved]);
    struct_facts!(f, Follow, "pfprof_follow", [scope, flags, pid, reserved]);
    number(&mut f, "PFPROF_MAGIC", abi::MAGIC);
    number(&mut f, "PFPROF_ABI_VERSION", abi::ABI_VERSION);
    number(&mut f, "PFPROF_MODE_NONE", abi::MODE_NONE);
    number(&mut f, "PFPROF_MODE_STRICT", abi::MODE_STRICT);
    number(&mut f, "PFPROF_MODE_RELAXED", abi::MODE_RELAXED);
    number(&mut f, "PFPROF_LOCK_FREE", abi::LOCK_FREE);
    number(&mut f, "PFPROF_LOCK_PRODUCER", abi::LOCK_PRODUCER);
    number(&mut f, "PFPROF_LOCK_CONSUMER", abi::LOCK_CONSUMER);
    number(&mut f, "PFPROF_CACHELINE_SIZE", abi::CACHELINE_SIZE);
    number(&mut f, "PFPROF_PAGE_SIZE", abi::PAGE_SIZE);
    number(&mut f, "PFPROF_DATA_OFFSET", abi::DATA_OFFSET);
    for pages in [1, 2, 129, 1 << 20] {
        number(
            &mut f,
            &format!("PFPROF_AREA_SIZE({pages})"),
            abi::area_size(pages),
        );
    }
    number(&mut f, "PFPROF_IOC_MAGIC", abi::IOC_MAGIC);
    number(&mut f, "PFPROF_IOC_INFO", abi::IOC_INFO);
    number(&mut f, "PFPROF_IOC_SET_MODE", abi::IOC_SET_MODE);
    number(&mut f, "PFPROF_IOC_WAIT_FULL", abi::IOC_WAIT_FULL);
    number(&mut f, "PFPROF_IOC_WAKE_PRODUCER", abi::IOC_WAKE_PRODUCER);
    number(&mut f, "PFPROF_IOC_ADD", abi::IOC_ADD);
    number(&mut f, "PFPROF_IOC_FOLLOW", abi::IOC_FOLLOW);
    number(&mut f, "PFPROF_IOC_END", abi::IOC_END);
    number(&mut f, "PFPROF_IOC_ADD_CGROUP", abi::IOC_ADD_CGROUP);
    number(&mut f, "PFPROF_IOC_ATTRIBUTE", abi::IOC_ATTRIBUTE);
    number(&mut f, "PFPROF_FAULTS_MAGIC", abi::FAULTS_MAGIC);
    number(&mut f, "PFPROF_MINOR_SAMPLING_MIN", abi::MINOR_SAMPLING_MIN);
    number(&mut f, "PFPROF_MINOR_SAMPLING_MAX", abi::MINOR_SAMPLING_MAX);
    number(&mut f, "PFPROF_FAULTS_DRAIN_MS", abi::FAULTS_DRAIN_MS);
    number(&mut f, "PFPROF_FAULT_MAJOR", abi::FAULT_MAJOR);
    number(&mut f, "PFPROF_FAULT_MINOR", abi::FAULT_MINOR);
    number(&mut f, "PFPROF_TARGET_INHERIT", abi::TARGET_INHERIT);
    number(&mut f, "PFPROF_TARGET_WHOLE_LIFE", abi::TARGET_WHOLE_LIFE);
    number(&mut f, "PFPROF_MEMBERS_MAX", abi::MEMBERS_MAX);
    number(&mut f, "PFPROF_DEPTH_MAX", abi::DEPTH_MAX);
    number(&mut f, "PFPROF_FOLLOW_NONE", abi::FOLLOW_NONE);
    number(&mut f, "PFPROF_FOLLOW_ALL", abi::FOLLOW_ALL);
    number(&mut f, "PFPROF_FOLLOW_DESCENDANTS", abi::FOLLOW_DESCENDANTS);
    number(&mut f, "PFPROF_FOLLOW_OTHER_USERS", abi::FOLLOW_OTHER_USERS);
    number(&mut f, "PFPROF_PERIOD_MS_DEFAULT", abi::PERIOD_MS_DEFAULT);
    number(&mut f, "PFPROF_PERIOD_MS_MIN", abi::PERIOD_MS_MIN);
    number(&mut f, "PFPROF_PERIOD_MS_MAX", abi::PERIOD_MS_MAX);
    number(
        &mut f,
        "PFPROF_BUFFER_PAGES_DEFAULT",
        abi::BUFFER_PAGES_DEFAULT,
    );
    number(&mut f, "PFPROF_BUFFER_PAGES_MIN", abi::BUFFER_PAGES_MIN);
    number(&mut f, "PFPROF_BUFFER_PAGES_MAX", abi::BUFFER_PAGES_MAX);
    number(&mut f, "PFPROF_LOCK_SPIN_NS", abi::LOCK_SPIN_NS);
    string(&mut f, "PFPROF_DEVICE_PATH", abi::DEVICE_PATH);
    string(&mut f, "PFPROF_PROC_PATH", abi::PROC_PATH);
    f
}

fn c_program(facts: &[Fact]) -> String {
    let mut c = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"pfprof.h\"\n\nint main(void)\n{\n",
    );
    for (i, fact) in facts.iter().enumerate() {
        let (format, arg) = (fact.c_format, &fact.c_arg);
        c.push_str(&format!("\tprintf(\"{i} {format}\\n\", {arg});\n"));
    }
    c.push_str("\treturn 0;\n}\n");
    c
}

/// Compile and run the program; its output, one "index value" line per fact.
fn run_c(program: &str) -> BTreeMap<usize, String> {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("layout");
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join("layout.c");
    let binary = dir.join("layout");
    std::fs::write(&source, program).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let status = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-I"])
        .arg(manifest.join("include"))
        .arg(&source)
        .arg("-o")
        .arg(&binary)
        .status()
        .unwrap_or_else(|e| panic!("running {cc} failed (install gcc and linux-libc-dev): {e}"));
    assert!(
        status.success(),
        "{cc} could not compile {}",
        source.display()
    );
    let output = Command::new(&binary).output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let (index, value) = line.split_once(' ').unwrap();
            (index.parse().unwrap(), value.to_owned())
        })
        .collect()
}

#[test]
fn every_size_offset_constant_and_ioctl_number_matches_the_c_header() {
    let facts = facts();
    let c_values = run_c(&c_program(&facts));
    assert_eq!(
        c_values.len(),
        facts.len(),
        "the C program printed every fact"
    );
    let mismatches: Vec<String> = facts
        .iter()
        .enumerate()
        .filter(|(i, fact)| c_values[i] != fact.rust)
        .map(|(i, fact)| format!("{}: C {} != Rust {}", fact.name, c_values[&i], fact.rust))
        .collect();
    assert!(
        mismatches.is_empty(),
        "abi.rs disagrees with pfprof.h:\n{}",
        mismatches.join("\n")
    );
}
