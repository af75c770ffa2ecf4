package discovery

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/podmpi/podmpi/hostfile"
)

// errNotSystemResolver: rawBadSRVTargets cannot ask a Resolver that is not
// a *net.Resolver (a test's fake answers what it answers).
var errNotSystemResolver = errors.New("not the system resolver")

// badTarget is an SRV record's target that discovery ignored.
type badTarget struct {
	Query  string // the SRV name asked
	Target string // the target as the DNS answer wrote it
	Why    string
}

func (b badTarget) String() string {
	return fmt.Sprintf("SRV target %q ignored in the answer for %s: %s", b.Target, b.Query, b.Why)
}

// noteBadSRV records an ignored target (once) and keeps it as the query's
// last error, which a timeout message shows.
func (f *finder) noteBadSRV(query, target, why string) {
	b := badTarget{Query: query, Target: target, Why: why}
	f.lastErr[query] = errors.New(b.String())
	if k := query + "\x00" + target; !f.badSeen[k] {
		f.badSeen[k] = true
		f.badSRV = append(f.badSRV, b)
	}
}

// noteDroppedSRV handles an SRV answer that Go's resolver returned with
// err because it dropped records with invalid target names: it asks the
// DNS server again itself, once per query, to name them; when it cannot,
// the note says a record was dropped without its name.
func (f *finder) noteDroppedSRV(ctx context.Context, query, cname string, err error) {
	if f.rawDone[query] {
		return
	}
	f.rawDone[query] = true
	name := cname
	if name == "" {
		name = query
	}
	bad, rerr := rawBadSRVTargets(ctx, f.r, name, f.lookupTimeout)
	if rerr != nil || len(bad) == 0 {
		why := fmt.Sprintf("the resolver dropped at least one record whose target is not a valid DNS name (%v) and did not say which", err)
		if rerr != nil && !errors.Is(rerr, errNotSystemResolver) {
			why += fmt.Sprintf("; asking the DNS server directly failed: %v", rerr)
		}
		f.noteBadSRV(query, "(unnamed)", why+"; `dig SRV "+name+"` shows it")
		return
	}
	for _, t := range bad {
		f.noteBadSRV(query, t, "not a valid DNS name (the resolver dropped the record)")
	}
}

// takeBadSRV returns the ignored targets found since the last call.
func (f *finder) takeBadSRV(from int) ([]badTarget, int) {
	return f.badSRV[from:], len(f.badSRV)
}

// rawBadSRVTargets asks a DNS server for the SRV records of the absolute
// name itself (the resolver it uses is r when that is a *net.Resolver with
// a Dial function, else the nameservers of /etc/resolv.conf over UDP) and
// returns the targets that are not valid host names.
func rawBadSRVTargets(ctx context.Context, r Resolver, name string, timeout time.Duration) ([]string, error) {
	dial := (&net.Dialer{}).DialContext
	switch nr := r.(type) {
	case *net.Resolver:
		if nr.Dial != nil {
			dial = nr.Dial
		}
	default:
		return nil, errNotSystemResolver
	}
	if !strings.HasSuffix(name, ".") {
		name += "."
	}
	qname, err := dnsmessage.NewName(name)
	if err != nil {
		return nil, fmt.Errorf("query name %q: %w", name, err)
	}
	id := uint16(rand.N(1 << 16))
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(dnsmessage.Question{Name: qname, Type: dnsmessage.TypeSRV, Class: dnsmessage.ClassINET}); err != nil {
		return nil, err
	}
	q, err := b.Finish()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for _, server := range nameservers("/etc/resolv.conf") {
		bad, err := askSRV(ctx, dial, server, q, id, timeout)
		if err == nil {
			return bad, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func askSRV(ctx context.Context, dial func(context.Context, string, string) (net.Conn, error), server string, q []byte, id uint16, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := dial(ctx, "udp", server)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := c.Write(q); err != nil {
		return nil, err
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return nil, err
		}
		var p dnsmessage.Parser
		h, err := p.Start(buf[:n])
		if err != nil || h.ID != id || !h.Response {
			continue // not our answer
		}
		if err := p.SkipAllQuestions(); err != nil {
			return nil, err
		}
		var bad []string
		for {
			rh, err := p.AnswerHeader()
			if errors.Is(err, dnsmessage.ErrSectionDone) {
				return bad, nil
			}
			if err != nil {
				return nil, err
			}
			if rh.Type != dnsmessage.TypeSRV {
				if err := p.SkipAnswer(); err != nil {
					return nil, err
				}
				continue
			}
			srv, err := p.SRVResource()
			if err != nil {
				return nil, err
			}
			t := srv.Target.String()
			if hostfile.ValidateName(strings.TrimSuffix(t, ".")) != nil {
				bad = append(bad, t)
			}
		}
	}
}

// nameservers reads "nameserver" lines of a resolv.conf as host:53
// addresses; none gives 127.0.0.1:53, as the C library does.
func nameservers(path string) []string {
	var out []string
	if f, err := os.Open(path); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() && len(out) < 3 {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 2 && fields[0] == "nameserver" && net.ParseIP(fields[1]) != nil {
				out = append(out, net.JoinHostPort(fields[1], "53"))
			}
		}
	}
	if len(out) == 0 {
		out = []string{"127.0.0.1:53"}
	}
	return out
}
