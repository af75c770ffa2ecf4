package kube

import (
	"context"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/record/util"
)

// Event types.
const (
	Normal  = corev1.EventTypeNormal
	Warning = corev1.EventTypeWarning
)

// maxMessage bounds an Event's message (the events API's own limit for a
// note is 1 KiB).
const maxMessage = 1024

// recorder writes core/v1 Events synchronously, through client-go's event
// correlator: a repeat of the same event (object, type, reason, message)
// becomes a count on the first one (lastTimestamp, count), similar events
// beyond ten in ten minutes are aggregated, and a token bucket limits the
// rate (25 Events of one type per object, then one every 5 minutes).
// Synchronous, because the failure Event is written right before the
// launcher exits, and client-go's broadcaster would drop it.
//
// The launcher's last Event goes through a correlator of its own (end),
// which nothing else uses: the Warnings written while it waited (a
// worker's pod flapping between ErrImagePull and ImagePullBackOff is a new
// reason each time) can use up corr's bucket, never the one of the Event
// that says how the job ended.
type recorder struct {
	c    *Client
	corr *record.EventCorrelator // every Event but the last
	end  *record.EventCorrelator // the launcher's last Event only
	host string
}

func newRecorder(c *Client) *recorder {
	host, _ := os.Hostname()
	return &recorder{c: c, corr: record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{}),
		end: record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{}), host: host}
}

// Event records an Event of type typ (Normal or Warning) with reason and
// message on the job's object (the TrainJob, MPIJob or JobSet, by uid, so
// that kubectl describe shows it) and on the launcher's own pod. It
// returns whether at least one was written; failures are logged once at
// INFO, never returned: an Event must not fail a job.
func (c *Client) Event(ctx context.Context, typ, reason, message string) bool {
	if c == nil {
		return false
	}
	return c.record(ctx, c.events.corr, typ, reason, message)
}

// EndEvent is Event for the launcher's last Event (how the job ended),
// with a rate budget that no other Event spends (see recorder). Call it
// once per run.
func (c *Client) EndEvent(ctx context.Context, typ, reason, message string) bool {
	if c == nil {
		return false
	}
	return c.record(ctx, c.events.end, typ, reason, message)
}

// record writes one Event through corr (see Event).
func (c *Client) record(ctx context.Context, corr *record.EventCorrelator, typ, reason, message string) bool {
	message = shorten(message, maxMessage)
	// The objects are learned once, in the background from the start; an
	// Event that comes first waits for them rather than go nowhere.
	_ = c.Resolve(ctx)
	c.mu.Lock()
	refs := []*corev1.ObjectReference{c.job, c.self}
	c.mu.Unlock()
	ok := false
	for _, ref := range refs {
		if ref != nil && c.events.write(ctx, corr, ref, typ, reason, message) {
			ok = true
		}
	}
	return ok
}

// write records one Event on ref, through corr.
func (r *recorder) write(ctx context.Context, corr *record.EventCorrelator, ref *corev1.ObjectReference, typ, reason, message string) bool {
	now := metav1.Time{Time: time.Now()}
	ev := &corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: util.GenerateEventName(ref.Name, now.UnixNano()), Namespace: ref.Namespace},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Type:                typ,
		Source:              corev1.EventSource{Component: ReportingComponent, Host: r.host},
		ReportingController: ReportingComponent,
		ReportingInstance:   r.host,
	}
	res, err := corr.EventCorrelate(ev)
	if err != nil || res.Skip {
		return false // rate-limited
	}
	ctx, cancel := context.WithTimeout(ctx, r.c.timeout)
	defer cancel()
	var out *corev1.Event
	if res.Event.Count > 1 {
		out, err = r.c.core.PatchEvent(ctx, ref.Namespace, res.Event.Name, res.Patch)
	}
	if res.Event.Count <= 1 || apierrors.IsNotFound(err) {
		res.Event.ResourceVersion = ""
		out, err = r.c.core.CreateEvent(ctx, ref.Namespace, res.Event)
	}
	if err != nil {
		_ = r.c.explain("create events", err)
		r.c.log.Debug("an Event was not written", "reason", reason, "object", ref.Kind+"/"+ref.Name, "err", err)
		return false
	}
	corr.UpdateState(out)
	return true
}

// shorten bounds message to max bytes (on a UTF-8 boundary). A trailing
// "; hint: ..." is kept whole when it fits in half of max: the fix matters
// more than the middle of a long list of hosts.
func shorten(message string, max int) string {
	if len(message) <= max {
		return message
	}
	const ell = "..."
	tail := ""
	if i := strings.LastIndex(message, "; hint: "); i > 0 && len(message)-i <= max/2 {
		tail = message[i:]
		message = message[:i]
	}
	cut := max - len(ell) - len(tail)
	for cut > 0 && !utf8.RuneStart(message[cut]) {
		cut--
	}
	return message[:cut] + ell + tail
}
