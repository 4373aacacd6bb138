//! pfprof's kernel-module tests. tests/vm/run.sh boots a Debian kernel under
//! qemu with this binary (static) and pfprof.ko in the initramfs; /init runs
//!
//!     pfprof-guest --module /pfprof.ko [FILTER...]
//!
//! which runs every test whose name contains one of the filters (all without
//! one; the `bench_` ones, measurements for docs/benchmarks.md, only when a
//! filter names them) but those whose name contains a filter's WORD given as
//! `-WORD`, prints `ok   <name>` or `FAIL <name>: <why>` per test (a why of several
//! lines goes on under it, each line as `  | <line>`) and
//! `N passed, M failed`, and exits non-zero if any failed. The same binary
//! plays the processes the tests profile (`pfprof-guest child ...`).

mod ancestry;
mod anon;
mod attribution;
mod cgroups;
mod charging;
mod child;
mod clone_chain;
mod cost;
mod cpu0;
mod depth;
mod device;
mod device_file;
mod e2e;
mod fault_injection;
mod faults;
mod fuzz;
mod harness;
mod holds;
mod hostile;
mod isolation;
mod klog;
mod kmod;
mod lifecycle;
mod load;
mod majors;
mod monitor;
mod period;
mod permissions;
mod races;
mod registration;
mod rng;
mod sampling;
mod sessions;
mod thrash;
mod user_resources;
mod users;
mod visibility;
mod zram;

use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use harness::{figure, Env, Skipped};

type Test = fn(&Env) -> Result<()>;

/// The tests, in the order they run: each named by its function (`ok   <name>`, the
/// filters), so that the name cannot disagree with what runs.
macro_rules! tests {
    ($($module:ident::$test:ident),* $(,)?) => {
        &[$((stringify!($test), $module::$test as Test)),*]
    };
}

const TESTS: &[(&str, Test)] = tests![
    lifecycle::module_loads_and_unloads_repeatedly_and_its_files_come_and_go,
    lifecycle::module_refuses_out_of_range_parameters_at_load,
    registration::registration_lists_and_unregisters_a_process,
    registration::every_malformed_or_refused_command_gets_its_errno_and_the_module_lives_on,
    device_file::device_refuses_bad_mmaps_and_bad_ioctls,
    device_file::poll_reports_ready_samples_and_the_end_of_the_session,
    sampling::every_fault_and_cpu_nanosecond_of_a_threaded_child_lands_in_one_sample,
    sampling::faults_before_the_session_starts_reach_its_first_sample,
    sampling::strict_mode_with_a_slow_consumer_on_a_small_ring_loses_nothing,
    sampling::relaxed_consumer_sleeping_past_a_wrap_accounts_for_every_sample,
    majors::major_faults_of_pages_swapped_in_sum_to_wait4_in_both_backends,
    sampling::a_deferred_periods_counts_arrive_in_the_next_sample_exactly,
    lifecycle::sigkilled_monitor_holding_the_lock_does_not_stop_the_sampler,
    lifecycle::consumer_blocked_in_wait_full_is_released_by_sigkill_and_the_module_unloads,
    lifecycle::consumer_sleeping_in_wait_full_wakes_when_the_last_process_leaves,
    lifecycle::sampler_sleeps_without_a_timer_while_nobody_is_registered,
    lifecycle::registrations_and_sessions_churning_at_once_leave_the_kernel_clean,
    e2e::monitor_profiles_work_through_the_module_in_both_modes,
    lifecycle::module_unloads_with_processes_registered_and_the_sampler_blocked,
    hostile::monitor_scribbling_every_word_for_seconds_cannot_stall_or_hurt_the_sampler,
    fuzz::proc_file_survives_fuzzing_and_registers_exactly_what_valid_commands_asked,
    faults::monitors_sigkilled_anywhere_leave_a_module_the_next_monitor_can_use,
    faults::processes_sigkilled_while_faulting_have_every_fault_in_a_strict_sample,
    load::eight_threads_churning_8000_processes_leave_exactly_the_live_registrations,
    permissions::nobody_may_profile_its_own_processes_only_and_open_the_device_as_udev_allows,
    permissions::the_monitor_tells_a_user_the_module_refuses_what_to_do,
    races::a_process_registered_and_unregistered_between_two_sampler_looks_still_ends_the_session,
    races::a_process_unregistered_while_the_sampler_is_mid_tick_still_ends_the_session,
    lifecycle::a_last_sample_left_by_a_closed_session_neither_reaches_nor_ends_the_next,
    period::the_sampler_keeps_the_period_asked_on_absolute_deadlines,
    period::a_sampler_slower_than_its_period_sleeps_after_every_collection,
    period::a_consumer_flashing_a_free_slot_cannot_make_the_sampler_collect_more_often,
    period::bench_sampler_cost_by_processes_and_threads,
    cost::bench_monitor_cost_by_backend,
    thrash::a_workload_exceeding_its_memory_cgroup_is_found_thrashing_from_its_announced_phases,
    thrash::the_same_workload_with_room_to_spare_is_not_found_thrashing,
    sessions::monitors_of_root_and_nobody_at_once_each_count_only_their_own_command,
    sessions::nobody_can_neither_join_prolong_nor_read_roots_session,
    sessions::a_shell_and_its_descendants_count_as_they_run_and_add_up_to_its_rusage,
    sessions::a_shell_reaping_children_all_through_the_collections_counts_each_once,
    sessions::a_tree_whose_ring_never_starts_pins_none_of_its_dead,
    sessions::a_process_in_two_sessions_is_counted_in_each_from_its_joining,
    user_resources::sessions_never_started_pin_no_dead_processes,
    visibility::a_registration_answers_to_its_current_leader_after_a_thread_execs_setuid,
    visibility::a_process_stops_being_counted_when_it_execs_a_setuid_program,
    e2e::a_descendant_nobody_waits_for_keeps_its_faults_and_the_trees_later_ones_count,
    fault_injection::every_allocation_of_the_module_fails_cleanly_under_fault_injection,
    device_file::the_ring_can_be_neither_pinned_nor_inherited_and_maps_read_only,
    visibility::nobody_following_everything_never_gets_roots_faults_and_root_gets_all_its_own,
    user_resources::one_user_neither_exceeds_its_sessions_and_registrations_nor_takes_others,
    user_resources::bench_another_users_registration_loop_and_roots_sampler,
    e2e::a_bare_monitor_gets_a_registered_childs_faults_however_their_starts_fall,
    cgroups::a_cgroup_target_counts_exactly_what_its_processes_did_inside_in_both_backends,
    ancestry::a_member_reparented_into_an_inheriting_members_tree_is_absorbed_without_harm,
    ancestry::a_member_added_300_levels_down_and_reparented_to_250_is_absorbed_without_harm,
    ancestry::a_member_one_level_past_the_walks_reparented_onto_their_limit_is_absorbed_without_harm,
    ancestry::a_member_reparented_to_an_inheriting_pid_namespace_init_is_absorbed_without_harm,
    ancestry::an_inheriting_join_absorbing_members_as_others_die_leaves_the_session_working,
    ancestry::an_inheriting_join_absorbing_members_added_before_it_as_they_die_leaves_the_session_working,
    ancestry::an_inheriting_join_absorbing_members_within_the_depth_bound_added_before_it_as_they_die_leaves_the_session_working,
    depth::an_inheriting_join_beside_a_deep_chain_never_absorbs_for_seconds,
    holds::bench_longest_hold_at_every_limit,
    charging::a_sessions_sampling_and_maps_are_charged_to_its_openers_cgroups,
    isolation::another_users_registrations_join_a_session_only_when_asked_and_never_end_it,
    isolation::another_users_registered_parent_neither_takes_in_nor_ends_a_sessions_own_target,
    isolation::a_session_handed_to_another_user_counts_only_what_that_user_may_read,
    isolation::a_cgroup_session_in_a_pid_namespace_counts_only_the_processes_it_can_name,
    isolation::a_member_that_execs_setuid_and_is_gone_before_the_next_look_is_withdrawn,
    isolation::opens_killed_while_their_sampler_starts_leave_no_session_to_another_users_recall,
    isolation::a_process_execing_again_and_again_is_never_withdrawn,
    isolation::a_descendant_that_runs_a_setuid_program_between_two_looks_is_not_counted,
    attribution::each_mappings_faults_are_where_work_put_them_in_both_backends,
    attribution::each_ranges_major_faults_are_on_the_function_that_read_it_in_both_backends,
    attribution::a_command_shorter_than_a_period_has_its_faults_on_its_file_and_program_in_both_backends,
    attribution::another_users_session_learns_nothing_of_a_process_it_may_not_read,
    attribution::threads_created_while_their_process_is_listed_are_recorded_once,
    attribution::a_descendant_reparented_stays_its_trees_and_is_recorded_once,
    attribution::a_process_that_execs_a_setuid_program_and_back_counts_as_unattributed,
    attribution::attribution_is_refused_to_an_opener_without_cap_perfmon_unless_the_module_allows_every_opener,
    attribution::inherited_event_copies_count_against_max_fault_threads,
    attribution::bench_attribution_cost_by_backend,
];

/// Prints a failure's verdict: `FAIL <what>`, its first line, then every further line
/// as `  | <line>`, which run.sh passes to CI's log as it does figures: a guest's
/// stderr quoted in a reason is read whole, not cut at its first line.
fn fail(what: &str) {
    let mut lines = what.lines();
    println!("FAIL {}", lines.next().unwrap_or_default());
    for line in lines {
        figure(line);
    }
}

fn run(env: &Env, filters: &[String]) -> ExitCode {
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let (left_out, named_by): (Vec<&str>, Vec<&str>) = filters
        .iter()
        .map(String::as_str)
        .partition(|f| f.starts_with('-'));
    for (name, test) in TESTS {
        let named = named_by.iter().any(|f| name.contains(f));
        if (!named_by.is_empty() || name.starts_with("bench_")) && !named
            || left_out.iter().any(|f| name.contains(&f[1..]))
        {
            continue;
        }
        // Every test starts without the module and leaves it unloaded, and the
        // kernel's checkers (lockdep, KASAN, WARN...) silent: run.sh checks the whole
        // log again, this names the test that made one speak. Each verdict says how
        // long the test took: what CI's time goes to.
        let started = std::time::Instant::now();
        let outcome = kmod::ensure_unloaded()
            .and_then(|()| klog::Mark::now())
            .and_then(|mark| {
                panic::catch_unwind(AssertUnwindSafe(|| test(env)))
                    .unwrap_or_else(|_| bail!("panicked"))?;
                mark.ensure_clean()
            })
            .and_then(|()| kmod::ensure_unloaded().context("the test left the module loaded"));
        let took = format!("({:.1} s)", started.elapsed().as_secs_f64());
        match outcome {
            Ok(()) => {
                println!("ok   {name} {took}");
                passed += 1;
            }
            Err(e) if e.downcast_ref::<Skipped>().is_some() => {
                println!("skip {name} {took}: {e:#}");
                skipped += 1;
            }
            Err(e) => {
                fail(&format!("{name} {took}: {e:#}"));
                failed += 1;
            }
        }
    }
    if passed + failed + skipped == 0 {
        println!("FAIL no test name contains any of {filters:?}");
        failed = 1;
    }
    // On a kernel with kmemleak (the debug kernel), after everything else.
    const KMEMLEAK: &str = "kmemleak_finds_nothing_the_module_allocated_after_the_suite";
    match klog::kmemleak_module_reports() {
        Ok(None) => {}
        Ok(Some((ours, all))) if ours.is_empty() => {
            figure(&format!(
                "kmemleak: {all} unreferenced objects in the kernel, none from pfprof"
            ));
            println!("ok   {KMEMLEAK}");
            passed += 1;
        }
        Ok(Some((ours, _))) => {
            fail(&format!("{KMEMLEAK}: {}", ours.join("\n")));
            failed += 1;
        }
        Err(e) => {
            fail(&format!("{KMEMLEAK}: {e:#}"));
            failed += 1;
        }
    }
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The processes the hardening tests run: `pfprof-guest hardening-child <mode> ...`.
fn hardening_child(args: &[String]) -> ExitCode {
    let result = match args.first().map(String::as_str) {
        Some("in-new-pid-ns") => fuzz::in_new_pid_ns(&args[1..]),
        Some("fuzz") => fuzz::fuzz_main().map(|()| ExitCode::SUCCESS),
        Some("chaos-monitor") if args.len() == 4 => {
            faults::chaos_monitor(&args[1], &args[2], &args[3]).map(|()| ExitCode::SUCCESS)
        }
        Some("full-ring") => faults::full_ring_monitor().map(|()| ExitCode::SUCCESS),
        Some("status") if args.len() == 3 => {
            permissions::status_command(&args[1], &args[2]).map(|()| ExitCode::SUCCESS)
        }
        Some("threads") if args.len() == 2 => races::threads(&args[1]).map(|()| ExitCode::SUCCESS),
        Some("open-device") => permissions::open_device().map(|()| ExitCode::SUCCESS),
        Some("non-dumpable") => permissions::non_dumpable().map(|()| ExitCode::SUCCESS),
        Some("non-dumpable-leaderless") => {
            permissions::non_dumpable_leaderless().map(|()| ExitCode::SUCCESS)
        }
        Some("deputy") if args.len() == 2 => {
            permissions::deputy(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("probe-session") if args.len() == 2 => {
            sessions::probe_session(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("pin-dead") if args.len() == 3 => {
            user_resources::pin_dead(&args[1], &args[2]).map(|()| ExitCode::SUCCESS)
        }
        Some("listed") if args.len() == 2 => {
            visibility::listed(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("follow-all") if args.len() == 2 => {
            visibility::follow_all(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("open-sessions") if args.len() == 2 => {
            user_resources::open_sessions(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("register-many") if args.len() == 2 => {
            user_resources::register_many(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("register-loop") if args.len() == 2 => {
            user_resources::register_loop(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("open-loop") => isolation::open_loop().map(|()| ExitCode::SUCCESS),
        Some("handed-session") if args.len() == 2 => {
            isolation::handed_session(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("pidns-cgroup-session") if args.len() == 2 => {
            isolation::pidns_cgroup_session(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("session-of") if args.len() == 2 => {
            isolation::session_of(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("tree-of") if args.len() == 2 => {
            charging::tree_of(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("costly-session") if args.len() == 2 => {
            charging::costly_session(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("exec-fail-walk") if args.len() == 2 => {
            fault_injection::exec_fail_walk(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("absorb") => ancestry::absorb(&args[1..]).map(|()| ExitCode::SUCCESS),
        Some("deep-chain") => depth::deep_chain().map(|()| ExitCode::SUCCESS),
        Some("holds") => holds::holds().map(|()| ExitCode::SUCCESS),
        Some("attribute-hidden") if args.len() == 2 => {
            attribution::attribute_hidden(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        Some("try-attribute") => {
            attribution::try_attribute(args.get(1).map(String::as_str) == Some("handed"))
                .map(|()| ExitCode::SUCCESS)
        }
        Some("own-session") if args.len() == 2 => {
            permissions::own_session(&args[1]).map(|()| ExitCode::SUCCESS)
        }
        _ => Err(anyhow::anyhow!("unknown hardening-child mode {args:?}")),
    };
    result.unwrap_or_else(|e| {
        eprintln!("hardening-child: {e:#}");
        ExitCode::FAILURE
    })
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("child") => child::main(&args[1..]),
        Some("hardening-child") => hardening_child(&args[1..]),
        Some("hog") if args.len() == 2 => harness::hog(&args[1]).map_or_else(
            |e| {
                eprintln!("hog: {e:#}");
                ExitCode::FAILURE
            },
            |()| ExitCode::SUCCESS,
        ),
        Some("--module") if args.len() >= 2 => {
            let env = Env {
                module: PathBuf::from(&args[1]),
            };
            run(&env, &args[2..])
        }
        _ => {
            eprintln!("usage: pfprof-guest --module PATH/pfprof.ko [FILTER...]");
            ExitCode::from(2)
        }
    }
}
