// Scheduled backups, the pure part: parsing a cluster's spec.backup.schedule, naming each
// run after its due time, finding the run due now from the runs that exist, and choosing
// which scheduled backups keep prunes. Nothing here reads the API or the clock: the
// scheduler (scheduler.go) hands everything in.

package backup

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/gomomento/valkey-operator/reconciler/views"
)

// LabelScheduled marks a ValkeyBackup the schedule made ("true"); only those are ever
// pruned. Its cluster is in render.LabelCluster.
const LabelScheduled = "valkey.gomomento.com/scheduled"

// runTimeLayout is the due-time suffix of a scheduled backup's name, in UTC.
const runTimeLayout = "20060102150405"

// ErrScheduleInvalid is what ParseSchedule returns for a schedule the cron parser refuses
// or that never comes due.
var ErrScheduleInvalid = errors.New("invalid backup schedule")

// ParseSchedule parses spec.backup.schedule: the five standard cron fields or a descriptor
// (@every <duration>, @daily, ...), in UTC. A time zone prefix is refused (the schema refuses
// it too): a schedule means the same whatever the operator's host says.
func ParseSchedule(spec string) (cron.Schedule, error) {
	s := strings.TrimSpace(spec)
	if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
		return nil, fmt.Errorf("%w %q: schedules are in UTC and take no time zone", ErrScheduleInvalid, spec)
	}
	sched, err := cron.ParseStandard(s)
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrScheduleInvalid, spec, err)
	}
	// robfig gives up after five years without a match (e.g. "0 0 30 2 *", February 30th).
	if sched.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("%w %q: it never comes due", ErrScheduleInvalid, spec)
	}
	return sched, nil
}

// RunName is the name of the scheduled backup of cluster due at due: {cluster}-{YYYYMMDDHHMMSS}
// in UTC. The name is what makes a run idempotent: a second attempt at the same due time
// (a restart, a stale cache) gets AlreadyExists.
func RunName(cluster string, due time.Time) string {
	return cluster + "-" + due.UTC().Format(runTimeLayout)
}

// RunTime is the due time a scheduled backup of cluster was named after; false when name is
// not such a name (a backup made by hand, or one labelled scheduled by hand).
func RunTime(cluster, name string) (time.Time, bool) {
	suffix, ok := strings.CutPrefix(name, cluster+"-")
	if !ok || len(suffix) != len(runTimeLayout) {
		return time.Time{}, false
	}
	t, err := time.ParseInLocation(runTimeLayout, suffix, time.UTC)
	if err != nil {
		return time.Time{}, false
	}
	return t, true
}

// LatestDue is the latest due time of sched after after and at or before now, false when
// none is. The runs missed in between are not made up: only the latest one is run.
func LatestDue(sched cron.Schedule, after, now time.Time) (time.Time, bool) {
	after, now = after.UTC(), now.UTC()
	if d, ok := sched.(cron.ConstantDelaySchedule); ok {
		first := d.Next(after)
		if first.After(now) {
			return time.Time{}, false
		}
		n := now.Sub(first) / d.Delay
		return first.Add(n * d.Delay), true
	}
	// Walk the due times of windows reaching back from now, each four times the last, so an
	// operator down for a long time with "* * * * *" walks the last hour, not every minute
	// since its last run; the last window starts at after.
	gap := now.Sub(after)
	for window := time.Hour; window > 0 && window < gap; window *= 4 {
		if t, ok := lastDueIn(sched, now.Add(-window), now); ok {
			return t, true
		}
	}
	return lastDueIn(sched, after, now)
}

// lastDueIn is the last due time of sched in (from, to].
func lastDueIn(sched cron.Schedule, from, to time.Time) (time.Time, bool) {
	var last time.Time
	for t := sched.Next(from); !t.IsZero() && !t.After(to); t = sched.Next(t) {
		last = t
	}
	return last, !last.IsZero()
}

// Run is what the schedule needs to know of one of its cluster's scheduled backups.
type Run struct {
	Name  string
	Due   time.Time // from the name
	Phase string    // "" counts as Pending (the schema default not yet applied)
}

func (r Run) active() bool {
	return r.Phase == "" || r.Phase == views.BackupPending || r.Phase == views.BackupRunning
}

// phaseOrPending is the phase to name in a message.
func (r Run) phaseOrPending() string {
	if r.Phase == "" {
		return views.BackupPending
	}
	return r.Phase
}

// Decision is what the scheduler does for a cluster now.
type Decision struct {
	// Create names the backup to create (empty: none).
	Create string
	// Due is the due time of the run created or skipped (zero: none was due).
	Due time.Time
	// Skip says why the run due at Due is not made (empty: it is not skipped).
	Skip string
	// SkippedFor names the run still Pending or Running that the run due was skipped for.
	SkippedFor string
	// Next is the following due time, when to look again.
	Next time.Time
}

// Inputs are what Decide reads.
type Inputs struct {
	Cluster string
	// Created is the cluster's creation time: the base when no scheduled backup exists.
	Created time.Time
	// State is the cluster's status.state.
	State string
	// Runs are the cluster's scheduled backups, in any order.
	Runs []Run
	Now  time.Time
	// Skipped is the due time this process last skipped for the cluster: it is not made
	// later, nor reported twice.
	Skipped time.Time
}

// Decide finds the run due now, if any, and whether it is made or skipped. The base is the
// newest scheduled backup's due time (or the cluster's creation), so an operator restart
// neither repeats a run (its name already exists) nor skips one (the newest name says where
// the schedule stands).
func Decide(sched cron.Schedule, in Inputs) Decision {
	base := in.Created.UTC().Truncate(time.Second)
	for _, r := range in.Runs {
		if r.Due.After(base) {
			base = r.Due
		}
	}
	due, ok := LatestDue(sched, base, in.Now)
	if !ok { // the first due time after the base is still ahead
		return Decision{Next: sched.Next(base)}
	}
	if due.Equal(in.Skipped) {
		return Decision{Next: sched.Next(due)}
	}
	// due is the latest due time at or before now, so the one after it is in the future.
	d := Decision{Due: due, Next: sched.Next(due)}
	if in.State != views.StateActive {
		d.Skip = fmt.Sprintf("cluster %s is %s, not Active", in.Cluster, orNone(in.State))
		return d
	}
	if r, ok := newestActive(in.Runs); ok {
		d.Skip = fmt.Sprintf("the backup %s is still %s", r.Name, r.phaseOrPending())
		d.SkippedFor = r.Name
		return d
	}
	d.Create = RunName(in.Cluster, due)
	return d
}

// newestActive is the newest run still Pending or Running.
func newestActive(runs []Run) (Run, bool) {
	var found Run
	ok := false
	for _, r := range runs {
		if r.active() && (!ok || r.Due.After(found.Due)) {
			found, ok = r, true
		}
	}
	return found, ok
}

// ToPrune is the scheduled backups keep removes, oldest first: the Completed ones beyond the
// newest keep, and each Failed one older than the keep-th newest Completed (keep newer runs
// completed since it failed). Pending and Running runs are never pruned.
func ToPrune(runs []Run, keep int) []Run {
	if keep < 1 {
		keep = 1
	}
	sorted := append([]Run(nil), runs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Due.After(sorted[j].Due) })
	var out []Run
	completed := 0
	for _, r := range sorted {
		switch r.Phase {
		case views.BackupCompleted:
			completed++
			if completed > keep {
				out = append(out, r)
			}
		case views.BackupFailed:
			if completed >= keep {
				out = append(out, r)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Due.Before(out[j].Due) })
	return out
}
