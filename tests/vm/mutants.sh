#!/usr/bin/env bash
# Kernel mutants: copies of pfprof.ko each broken on purpose in one named way,
# and the VM tests that must fail on it. For each mutant, the module's tree
# (as DKMS gets it) is copied, the mutant's edit applied, the copy built for
# KERNEL, and tests/vm/run.sh boots it (--module) with the mutant's tests
# only; the mutant is killed when run.sh fails. Prints one line per mutant
# and "N killed, M survived"; exits 0 only if every mutant was killed.
#
#   tests/vm/mutants.sh --kernel KERNEL [NAME...]
#
# KERNEL: a Debian kernel version with its headers installed, as run.sh takes
# it (not the debug kernel: its suite is the slowest, and these mutants break
# counts, not memory). NAME: only these mutants (all by default; --list
# lists them). Each edit must change its file: when the module moves on, a
# mutant whose code is gone fails the script instead of passing unchanged.
# docs/reliability.md has what a run found.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/vm/lib.sh
. "$repo/tests/vm/lib.sh"

# NAME|TESTS: the mutant mutate_NAME, and the run.sh filters of the tests that
# must fail on it.
mutants=(
	"relaxed_drops_a_sample|relaxed_consumer_sleeping_past_a_wrap"
	"relaxed_skips_a_number|relaxed_consumer_sleeping_past_a_wrap"
	"majors_reported_as_0|major_faults"
	"deferred_period_dropped|a_deferred_periods_counts"
	"follow_filter_removed|monitors_of_root_and_nobody_at_once"
	"follow_ignores_the_openers_permission|nobody_following_everything"
	"max_sessions_ignored|one_user_neither_exceeds the_monitor_tells_a_user"
	"joining_baseline_ignored|a_process_in_two_sessions"
)

# edit FILE PERL: the substitution PERL (perl -0p) applied to FILE of the tree
# being built; fails when it changes nothing.
edit() {
	local file=$1 expr=$2
	cp "$file" "$file.unmutated"
	perl -0pi -e "$expr" "$file"
	if cmp -s "$file" "$file.unmutated"; then
		echo "mutants.sh: the edit of $file matches nothing: the module moved on, write the mutant again" >&2
		return 1
	fi
	rm "$file.unmutated"
}

# Relaxed mode: every 8th sample is reported written but never is, its counts
# gone (what the consumer cannot see: nothing is lost by its arithmetic).
mutate_relaxed_drops_a_sample() {
	edit ring.c 's{(\t/\* Advisory: read_seq is whatever the consumer wrote\. \*/\n)}{\tstatic unsigned int pfprof_offers;\n\n\tif (++pfprof_offers % 8 == 0) {\n\t\tpfprof_lock_release(&a->lock);\n\t\treturn PFPROF_PUT_DONE;\n\t}\n$1}'
}

# Relaxed mode: every 8th sample takes two sequence numbers, one of them never
# written (the consumer's arithmetic counts it, received or lost, all the same).
mutate_relaxed_skips_a_number() {
	edit ring.c 's{(\t/\* Advisory: read_seq is whatever the consumer wrote\. \*/\n)}{\tstatic unsigned int pfprof_numbers;\n\n\tif (++pfprof_numbers % 8 == 0)\n\t\tr->write_seq++;\n$1}'
}

# Every major fault is read as none.
mutate_majors_reported_as_0() {
	edit counters.c 's{(\t\talive = !list_empty\(&sig->thread_head\);\n)}{\t\town->major = 0;\n\t\tif (reaped)\n\t\t\treaped->major = 0;\n$1}'
}

# A period the consumer's lock kept out of the ring is dropped instead of
# carried into the next sample.
mutate_deferred_period_dropped() {
	edit sampler.c 's{(\t\tundelivered = put != PFPROF_PUT_DONE;\n)}{\t\tif (put == PFPROF_PUT_DEFERRED)\n\t\t\tput = PFPROF_PUT_DONE;\n$1}'
}

# A session that follows a process's descendants takes every registration.
mutate_follow_filter_removed() {
	edit session.c 's{if \(s->follow == PFPROF_FOLLOW_ALL\) \{}{if (true) \{}'
}

# A following session is offered registrations its opener may not read.
mutate_follow_ignores_the_openers_permission() {
	edit session.c 's{follows = follows && pfprof_opener_may_read\(s->file, leader\);}{follows = follows \&\& (pfprof_opener_may_read(s->file, leader) || true);}'
}

# A user opens as many sessions as it likes.
mutate_max_sessions_ignored() {
	edit session.c 's{if \(pfprof_sessions_of\(s->owner\) >= pfprof_max_sessions\)}{if (false \&\& pfprof_sessions_of(s->owner) >= pfprof_max_sessions)}'
}

# A process ADDed without WHOLE_LIFE is counted from its birth.
mutate_joining_baseline_ignored() {
	edit members.c 's{\tif \(!\(flags & PFPROF_TARGET_WHOLE_LIFE\)\)\n\t\tm->seen = m->now;\n}{}'
}

kernel=
names=()
while (($#)); do
	case $1 in
	--kernel) kernel=${2-}; (($# > 1)) && shift ;;
	--kernel=*) kernel=${1#--kernel=} ;;
	--list) printf '%s\n' "${mutants[@]%%|*}"; exit 0 ;;
	-h | --help) sed -n '2,18p' "$0"; exit 0 ;;
	*) names+=("$1") ;;
	esac
	shift
done
[[ $kernel != debug ]] || vm_die "the mutants run on a Debian kernel, not the debug one"
vm_select_kernel "$kernel"

work=$(mktemp -d /tmp/pfprof-mutants.XXXXXX)
trap 'rm -rf "$work"' EXIT

killed=0 survived=0
for entry in "${mutants[@]}"; do
	name=${entry%%|*}
	read -ra tests <<<"${entry#*|}"
	if ((${#names[@]})) && [[ " ${names[*]} " != *" $name "* ]]; then
		continue
	fi
	mkdir -p "$work/$name"
	vm_build_module "$work/$name" "mutate_$name"
	echo "mutants.sh: $name: booting it with ${tests[*]}"
	if bash "$repo/tests/vm/run.sh" --kernel "$kernel" --module "$vm_module" "${tests[@]}" \
		>"$work/$name/run.log" 2>&1; then
		echo "SURVIVED $name: ${tests[*]} passed"
		survived=$((survived + 1))
	else
		echo "killed   $name:"
		grep -E '^FAIL ' "$work/$name/run.log" | sed 's/^/    /' | cut -c1-400
		killed=$((killed + 1))
	fi
done
echo "$killed killed, $survived survived"
((survived == 0 && killed > 0))
