// Package launcherid is the identity one launcher process declares to the
// worker-agents it connects to: which instance of the job's launcher it is
// (a random id per process), its pod (UID, host name) and when it started.
//
// A worker-agent uses it for one thing: when a launcher instance of the job
// is lost without closing its connections (its node died, its pod's network
// was cut, its process was frozen), the MPI daemons it started keep running,
// holding their ranks and the GPUs, until the kernel's TCP keepalive drops the
// connection (about 2 h), as under OpenSSH. When a newer instance of the same
// job's launcher connects (the Job's replacement pod, or the same pod's
// container restarted), the agent ends the older instance's sessions at once
// (package sshd). Clients that declare nothing are never ended that way.
//
// The identity travels in two forms:
//
//   - on the wire, as the SSH global request RequestType sent right after
//     authentication and before any session (Declaration, ParseDeclaration):
//     a versioned payload that adds the instance's age, measured on the
//     launcher's clock just before sending, so that the agent can place the
//     instance's start on its own clock without trusting the launcher's;
//   - in the environment of the launcher's mpirun, EnvName, so that every
//     podmpi-rsh mpirun starts on the launcher pod (the relay or the full
//     client) declares the same instance (Value, ParseValue).
//
// None of it is secret: the connection that carries it is authenticated
// with the job key already.
package launcherid

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"
)

// RequestType is the SSH global request that carries a Declaration. It is
// sent with want-reply: worker-agent answers true when it recorded the
// instance, and OpenSSH or an older agent answers false (unknown request),
// which changes nothing for the client.
const RequestType = "podmpi-launcher@podmpi.io"

// EnvName carries the instance (Value) in the environment of the launcher's
// mpirun, for the podmpi-rsh processes it starts.
const EnvName = "PODMPI_LAUNCHER_INSTANCE"

// version is the layout of the wire payload and of the environment value.
// A reader refuses another version; fields added at the end of the wire
// payload within this version are ignored by older readers.
const version = 1

// Bounds of the fields, checked on both sides.
const (
	idBytes     = 16
	maxPodUID   = 64
	maxHostname = 253
	// MaxAge bounds a declared age: a launcher older than a year is a
	// broken clock, not a job.
	MaxAge = 365 * 24 * time.Hour
)

// Instance is one launcher process of a job.
type Instance struct {
	// ID is 32 lowercase hex digits, random for each launcher process.
	ID string
	// PodUID is the launcher's pod (downward API metadata.uid); "" when
	// the launcher was not given it. A restarted container keeps it; a
	// replacement pod has another.
	PodUID string
	// Hostname is the launcher pod's host name (its pod name).
	Hostname string
	// Start is when the launcher process started, on its own clock. In
	// the launcher process it carries a monotonic reading, so its age
	// does not follow steps of the wall clock.
	Start time.Time
}

// New returns the identity of a launcher process that started at start,
// with a fresh random ID. A podUID or hostname that cannot be carried (too
// long, characters outside [A-Za-z0-9._-]) is left empty.
func New(podUID, hostname string, start time.Time) Instance {
	b := make([]byte, idBytes)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return Instance{ID: hex.EncodeToString(b), PodUID: clean(podUID, maxPodUID), Hostname: clean(hostname, maxHostname), Start: start}
}

// IsZero reports whether i is the zero Instance (no identity).
func (i Instance) IsZero() bool { return i.ID == "" }

// Short is the ID's first 8 digits, for messages.
func (i Instance) Short() string {
	if len(i.ID) < 8 {
		return i.ID
	}
	return i.ID[:8]
}

// String names the instance for people: "launcher tj-launcher-0-0 (pod
// uid 1b2c..., instance 0a1b2c3d, started 2026-01-02T03:04:05Z)".
func (i Instance) String() string {
	host := i.Hostname
	if host == "" {
		host = "(no host name)"
	}
	uid := i.PodUID
	if uid == "" {
		uid = "not given"
	}
	return fmt.Sprintf("launcher %s (pod uid %s, instance %s, started %s)", host, uid, i.Short(),
		i.Start.UTC().Format(time.RFC3339))
}

// OnHost reports whether the instance is the launcher of the pod whose
// host name is hostname (as New keeps it).
func (i Instance) OnHost(hostname string) bool { return i.Hostname == clean(hostname, maxHostname) }

// Age is how long the instance has run at now (0 when now is before its
// start, as after a step of the wall clock).
func (i Instance) Age(now time.Time) time.Duration { return max(now.Sub(i.Start), 0) }

// Value is the instance as EnvName holds it:
// "1 <id> <start, unix ns> <pod uid or -> <host name or ->".
func (i Instance) Value() string {
	return strings.Join([]string{strconv.Itoa(version), i.ID, strconv.FormatInt(i.Start.UnixNano(), 10),
		orDash(i.PodUID), orDash(i.Hostname)}, " ")
}

// ParseValue reads what Value wrote.
func ParseValue(s string) (Instance, error) {
	f := strings.Split(s, " ")
	if len(f) != 5 {
		return Instance{}, fmt.Errorf("%s: want 5 fields (version, id, start, pod uid, host name), got %d", EnvName, len(f))
	}
	if f[0] != strconv.Itoa(version) {
		return Instance{}, fmt.Errorf("%s: version %.8q, want %d", EnvName, f[0], version)
	}
	ns, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || ns <= 0 {
		return Instance{}, fmt.Errorf("%s: start %.24q is not a positive unix time in nanoseconds", EnvName, f[2])
	}
	i := Instance{ID: f[1], PodUID: fromDash(f[3]), Hostname: fromDash(f[4]), Start: time.Unix(0, ns)}
	if err := i.check(); err != nil {
		return Instance{}, fmt.Errorf("%s: %w", EnvName, err)
	}
	return i, nil
}

// wire is the RequestType payload, in the SSH wire encoding (RFC 4251).
type wire struct {
	Version  uint32
	ID       string
	PodUID   string
	Hostname string
	Start    uint64 // unix ns, the launcher's clock: for people only
	Age      uint64 // ns since Start on the launcher's clock, just before sending
	Rest     []byte `ssh:"rest"`
}

// Declaration is the RequestType payload of i, sent at now.
func (i Instance) Declaration(now time.Time) []byte {
	return ssh.Marshal(wire{Version: version, ID: i.ID, PodUID: i.PodUID, Hostname: i.Hostname,
		Start: uint64(max(i.Start.UnixNano(), 0)), Age: uint64(i.Age(now))})
}

// ParseDeclaration reads a RequestType payload: the instance (its Start
// is the launcher's clock, for people) and its age when it was sent.
func ParseDeclaration(b []byte) (Instance, time.Duration, error) {
	var w wire
	if err := ssh.Unmarshal(b, &w); err != nil {
		return Instance{}, 0, fmt.Errorf("malformed %s payload: %w", RequestType, err)
	}
	if w.Version != version {
		return Instance{}, 0, fmt.Errorf("%s version %d, want %d", RequestType, w.Version, version)
	}
	if w.Start == 0 || w.Start > 1<<63-1 {
		return Instance{}, 0, fmt.Errorf("%s: start %d out of range", RequestType, w.Start)
	}
	if w.Age > uint64(MaxAge) {
		return Instance{}, 0, fmt.Errorf("%s: age %d ns is more than %s", RequestType, w.Age, MaxAge)
	}
	i := Instance{ID: w.ID, PodUID: w.PodUID, Hostname: w.Hostname, Start: time.Unix(0, int64(w.Start))}
	if err := i.check(); err != nil {
		return Instance{}, 0, fmt.Errorf("%s: %w", RequestType, err)
	}
	return i, time.Duration(w.Age), nil
}

// ValidID reports whether id has the form of an instance ID.
func ValidID(id string) bool {
	if len(id) != 2*idBytes {
		return false
	}
	for _, c := range []byte(id) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func (i Instance) check() error {
	switch {
	case !ValidID(i.ID):
		return fmt.Errorf("instance id %.40q is not %d lowercase hex digits", i.ID, 2*idBytes)
	case clean(i.PodUID, maxPodUID) != i.PodUID:
		return errors.New("pod uid too long or with characters outside [A-Za-z0-9._-]")
	case clean(i.Hostname, maxHostname) != i.Hostname:
		return errors.New("host name too long or with characters outside [A-Za-z0-9._-]")
	}
	return nil
}

// clean returns s when it has at most n bytes of [A-Za-z0-9._-], else "".
func clean(s string, n int) string {
	if len(s) > n {
		return ""
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return ""
		}
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fromDash(s string) string {
	if s == "-" {
		return ""
	}
	return s
}
