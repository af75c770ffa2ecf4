// Package awaited says what the launcher's waits see: for every host a wait
// still waits for (a name in DNS, a worker-agent's /info, an SSH port), what
// its last attempt got, in the words of the progress lines.
//
// A wait that only counts ("0/1 worker-agents answered; waiting for
// 10.0.0.7") looks the same whether the agent is slow to start or a
// NetworkPolicy drops every packet, until its deadline says more minutes
// later. So every progress line names, per missing host, the last answer
// from its first line on: NXDOMAIN, no answer from the DNS server
// 10.96.0.10:53, connection refused on 10.0.0.7:9022, an HTTP status.
//
// The words come from one place for every wait: DNS classifies a failed
// lookup, Net a failed connection or request, and Line writes the hosts of
// one progress line, each with its answer while they are few, grouped by
// answer when they are many, so that 1024 missing workers give a line of a
// few groups and never a 1024-entry list. Tracker follows a wait that asks
// many hosts in parallel (the slots phase, the SSH probe) and writes its
// progress lines.
//
// None of this decides anything: an answer is what the next line says, never
// a reason to end a wait before its deadline.
package awaited

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"syscall"
)

// Answer is what one attempt at a host got when it was not what the wait
// waits for.
type Answer struct {
	// Kind is the answer without what differs from host to host, the key
	// by which a long line groups its hosts: "NXDOMAIN", "no answer from
	// the DNS server 10.96.0.10:53", "connection refused on port 9022",
	// "HTTP 503 Service Unavailable".
	Kind string
	// Detail is the answer for this host ("connection refused on
	// 10.0.0.7:9022"); "" means Kind says it all.
	Detail string
}

// Text is the answer for one host: Detail, else Kind.
func (a Answer) Text() string {
	if a.Detail != "" {
		return a.Detail
	}
	return a.Kind
}

// IsZero reports whether there is no answer yet (the first attempt has not
// returned).
func (a Answer) IsZero() bool { return a.Kind == "" && a.Detail == "" }

// Host is one host a wait still waits for.
type Host struct {
	// Name is the host as the wait lists it.
	Name string
	// Answer is what its last attempt got; zero while its first attempt
	// has not returned.
	Answer Answer
	// Note is what else is known of it (what Kubernetes says of its pod),
	// "" for nothing.
	Note string
}

// notAnswered is the group of hosts whose first attempt has not returned.
const notAnswered = "no answer yet"

// maxGroups bounds the groups one line shows; the hosts of the others are
// counted.
const maxGroups = 4

// namesPerGroup bounds the names one group shows.
const namesPerGroup = 3

// Line lists hosts for a progress line, in their order. Up to maxNames hosts
// are each listed with their answer and note, neighbours with the same
// answer and no note sharing it:
//
//	tj-node-0-1.tj, tj-node-0-2.tj (no answer from the DNS server 10.96.0.10:53), tj-node-0-3.tj (pod tj-node-0-3-x is Pending ...; NXDOMAIN)
//
// More are grouped by Answer.Kind, the largest group first, at most four
// groups of at most three names each, the hosts of further groups counted:
//
//	1024: 1000 with no answer from the DNS server 10.96.0.10:53 (tj-node-0-0.tj, tj-node-0-1.tj, tj-node-0-2.tj and 997 more); 24 with NXDOMAIN (...)
//
// or, when they all got the same answer, "a, b, c and 97 more (NXDOMAIN)".
// Hosts none of which has an answer yet are listed as names only.
func Line(hosts []Host, maxNames int) string {
	if len(hosts) == 0 {
		return ""
	}
	maxNames = max(maxNames, 1)
	if !slices.ContainsFunc(hosts, func(h Host) bool { return !h.Answer.IsZero() }) {
		names := make([]string, len(hosts))
		for i, h := range hosts {
			names[i] = withNote(h)
		}
		return Names(names, maxNames)
	}
	if len(hosts) <= maxNames {
		// Each host with its answer and note; neighbours that got the
		// same answer and have no note share it: "a, b (NXDOMAIN)".
		var parts, run []string
		for i, h := range hosts {
			run = append(run, h.Name)
			if next := i + 1; h.Note == "" && next < len(hosts) && hosts[next].Note == "" && hosts[next].Answer.Text() == h.Answer.Text() {
				continue
			}
			var words []string // what Kubernetes says first: it says more
			if h.Note != "" {
				words = append(words, h.Note)
			}
			if !h.Answer.IsZero() {
				words = append(words, h.Answer.Text())
			}
			part := strings.Join(run, ", ")
			if len(words) > 0 {
				part += " (" + strings.Join(words, "; ") + ")"
			}
			parts, run = append(parts, part), nil
		}
		return strings.Join(parts, ", ")
	}
	type group struct {
		kind  string
		names []string
	}
	var groups []*group
	byKind := map[string]*group{}
	for _, h := range hosts {
		kind := h.Answer.Kind
		if kind == "" {
			kind = h.Answer.Detail
		}
		if kind == "" {
			kind = notAnswered
		}
		g := byKind[kind]
		if g == nil {
			g = &group{kind: kind}
			byKind[kind] = g
			groups = append(groups, g)
		}
		g.names = append(g.names, withNote(h))
	}
	if len(groups) == 1 {
		return Names(groups[0].names, maxNames) + " (" + groups[0].kind + ")"
	}
	slices.SortStableFunc(groups, func(a, b *group) int { return len(b.names) - len(a.names) })
	var b strings.Builder
	fmt.Fprintf(&b, "%d: ", len(hosts))
	for i, g := range groups {
		if i == maxGroups {
			rest := 0
			for _, o := range groups[i:] {
				rest += len(o.names)
			}
			fmt.Fprintf(&b, "; and %d more with %d other answers", rest, len(groups)-i)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%d with %s (%s)", len(g.names), g.kind, Names(g.names, namesPerGroup))
	}
	return b.String()
}

// withNote is the host's name with its note, if any.
func withNote(h Host) string {
	if h.Note == "" {
		return h.Name
	}
	return h.Name + " (" + h.Note + ")"
}

// Names joins up to n names and adds "and K more".
func Names(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}

// DNS names what a failed lookup got. The server is the DNSError's (Go's
// own resolver names the one it asked last), else server ("" leaves it
// unnamed):
//
//   - NXDOMAIN (Go's "no such host"), or "no records" for another empty
//     answer: the name does not exist (yet).
//   - "no answer from the DNS server <addr>": the lookup timed out.
//   - "connection refused by the DNS server <addr>": an ICMP port
//     unreachable came back instead of an answer.
//   - "DNS error from <addr>: <error>" for an answer that is an error
//     (SERVFAIL: "server misbehaving").
//
// Silent tells the middle two, where nothing answered, from the others.
func DNS(err error, server string) Answer {
	var de *net.DNSError
	if !errors.As(err, &de) {
		if isTimeout(err) {
			return Answer{Kind: "no answer from the DNS server" + at(server)}
		}
		return Answer{Kind: oneLine(err.Error())}
	}
	if de.Server != "" {
		server = de.Server
	}
	switch {
	case de.IsNotFound && de.Err == "no such host":
		return Answer{Kind: "NXDOMAIN"}
	case de.IsNotFound:
		return Answer{Kind: "no records"}
	case de.IsTimeout:
		return Answer{Kind: "no answer from the DNS server" + at(server)}
	case strings.Contains(de.Err, "connection refused"):
		return Answer{Kind: "connection refused by the DNS server" + at(server)}
	}
	from := "DNS error"
	if server != "" {
		from += " from " + server
	}
	return Answer{Kind: from + ": " + oneLine(de.Err)}
}

func at(server string) string {
	if server == "" {
		return ""
	}
	return " " + server
}

// Silent reports whether err is a lookup that no DNS server answered: it
// timed out, or the server's port was unreachable. Those point at the path
// to the DNS server (a NetworkPolicy's egress rule) rather than at the name.
func Silent(err error) bool {
	var de *net.DNSError
	if errors.As(err, &de) {
		return de.IsTimeout || strings.Contains(de.Err, "connection refused")
	}
	return false
}

// Net names what a failed connection or request to addr (host:port) got.
// A DNS failure is DNS's; the others are:
//
//   - "connection refused on <addr>" (Kind "connection refused on port
//     <port>"): nothing listens there;
//   - "no answer from <addr> (timeout)" (Kind "timeout on port <port>"):
//     packets dropped, or a server too slow;
//   - "connection reset by <addr>", "no route to <addr>";
//   - else the error's own text.
func Net(err error, addr string) Answer {
	port := addr
	if _, p, serr := net.SplitHostPort(addr); serr == nil {
		port = p
	}
	var de *net.DNSError
	var ue *url.Error
	switch {
	case errors.As(err, &de):
		return DNS(err, "")
	case errors.Is(err, syscall.ECONNREFUSED):
		return Answer{Kind: "connection refused on port " + port, Detail: "connection refused on " + addr}
	case isTimeout(err):
		return Answer{Kind: "timeout on port " + port, Detail: "no answer from " + addr + " (timeout)"}
	case errors.Is(err, syscall.ECONNRESET):
		return Answer{Kind: "connection reset on port " + port, Detail: "connection reset by " + addr}
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return Answer{Kind: "no route to the host", Detail: "no route to " + addr}
	case errors.As(err, &ue):
		return Answer{Kind: oneLine(ue.Err.Error())} // the URL is the host's own
	}
	return Answer{Kind: oneLine(err.Error())}
}

// HTTP names an HTTP answer that is not the one awaited: "HTTP 503 Service
// Unavailable".
func HTTP(status string) Answer {
	return Answer{Kind: "HTTP " + status}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

func oneLine(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(s), " ")
}
