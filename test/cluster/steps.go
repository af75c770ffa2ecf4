package cluster

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// A step of `up` is timed: its duration is printed when it ends ("== step
// NAME: 1m2s") and kept in cluster.json, so that a slow start names its slow
// part.
type stepTimes struct {
	mu sync.Mutex
	d  map[string]float64 // seconds, by step name
}

func (s *stepTimes) record(name string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.d == nil {
		s.d = map[string]float64{}
	}
	s.d[name] = d.Round(100 * time.Millisecond).Seconds()
}

func (s *stepTimes) snapshot() map[string]float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]float64, len(s.d))
	for k, v := range s.d {
		out[k] = v
	}
	return out
}

// step runs fn as the named step of up, printing and recording its time.
func (c *Cluster) step(name string, fn func() error) error {
	start := time.Now()
	err := fn()
	d := time.Since(start)
	c.times.record(name, d)
	if err != nil {
		c.logf("== step %s: failed after %s", name, d.Round(100*time.Millisecond))
		return err
	}
	c.logf("== step %s: %s", name, d.Round(100*time.Millisecond))
	return nil
}

// buildStep is one independent build of up: Go binaries from the module
// proxy, or the podmpi images. The steps of then run after it, one by one, in
// its lane (the shared module runs one go build at a time); each is waited
// for by its own names.
type buildStep struct {
	name string
	run  func(context.Context) error
	// provides are the names it is waited for by (default: name).
	provides []string
	then     []buildStep
}

func (s buildStep) names() []string {
	if len(s.provides) > 0 {
		return s.provides
	}
	return []string{s.name}
}

// partSteps are the build steps of parts, in two chains side by side. The
// shared module's parts: Kubernetes and CoreDNS in one go build (the control
// plane waits for them), then the controllers in another (their links and
// what they alone need compile side by side). The other parts, each built as
// released: one after the other, each reuses what the one before compiled of
// the same dependency versions (a Trainer and the JobSet it requires pin the
// same Kubernetes libraries).
func (c *Cluster) partSteps(ctx context.Context, parts []Part) ([]buildStep, error) {
	shared, err := c.B.Shared(ctx)
	if err != nil {
		return nil, err
	}
	var core, controllers, released []Part
	for _, p := range parts {
		switch {
		case !inSet(shared, p):
			released = append(released, p)
		case p.Name == "kubernetes" || p.Name == "coredns":
			core = append(core, p)
		default:
			controllers = append(controllers, p)
		}
	}
	group := func(ps []Part) buildStep {
		var keys []string
		for _, p := range ps {
			keys = append(keys, p.Key())
		}
		return buildStep{name: strings.Join(keys, " + "), provides: keys,
			run: func(ctx context.Context) error { return c.B.BuildShared(ctx, ps...) }}
	}
	var chains [2][]buildStep
	for _, g := range [][]Part{core, controllers} {
		if len(g) > 0 {
			chains[0] = append(chains[0], group(g))
		}
	}
	for _, p := range released {
		chains[1] = append(chains[1], buildStep{name: p.Key(), run: func(ctx context.Context) error { _, err := c.B.Build(ctx, p); return err }})
	}
	var steps []buildStep
	for _, ch := range chains {
		if len(ch) > 0 {
			first := ch[0]
			first.then = ch[1:]
			steps = append(steps, first)
		}
	}
	return steps, nil
}

// builds runs independent build steps side by side, lanes at a time, in the
// order given (put the longest first), and lets up wait for each by name
// while the others go on: the control plane starts as soon as Kubernetes and
// CoreDNS are built, while the controllers still build.
type builds struct {
	done map[string]chan struct{}
	mu   sync.Mutex
	errs map[string]error
}

func (c *Cluster) startBuilds(ctx context.Context, lanes int, steps []buildStep) *builds {
	b := &builds{done: map[string]chan struct{}{}, errs: map[string]error{}}
	queue := make(chan buildStep, len(steps))
	for _, s := range steps {
		for _, t := range append([]buildStep{s}, s.then...) {
			ch := make(chan struct{})
			for _, n := range t.names() {
				b.done[n] = ch
			}
		}
		queue <- s
	}
	close(queue)
	for i := 0; i < lanes; i++ {
		go func() {
			for s := range queue {
				for _, t := range append([]buildStep{s}, s.then...) {
					err := ctx.Err()
					if err == nil {
						err = c.step("build "+t.name, func() error { return t.run(ctx) })
					}
					b.mu.Lock()
					for _, n := range t.names() {
						b.errs[n] = err
					}
					b.mu.Unlock()
					close(b.done[t.names()[0]])
				}
			}
		}()
	}
	return b
}

// wait blocks until the named builds have ended and returns their errors.
func (b *builds) wait(ctx context.Context, names ...string) error {
	var errs []string
	for _, n := range names {
		ch, ok := b.done[n]
		if !ok {
			return fmt.Errorf("no build step %q", n)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.mu.Lock()
		if err := b.errs[n]; err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", n, err))
		}
		b.mu.Unlock()
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fmt.Errorf("build failed: %s", strings.Join(errs, "; "))
	}
	return nil
}

// BuildAll builds (or finds cached) every binary of the defaults, or with
// all of every pinned version, side by side.
func (c *Cluster) BuildAll(ctx context.Context, all bool) error {
	trainers, mpiops := c.Pins.Trainer[:1], c.Pins.MPIOperator[:1]
	if all {
		trainers, mpiops = c.Pins.Trainer, c.Pins.MPIOperator
	}
	// The registry and helm first among the parts outside the shared module
	// (up builds the registry; helm, when up leaves it to the build behind
	// the tests, is wanted by TestInstall, which runs before
	// TestMPIOperator and TestTrainer); then mpi-operator before Trainer:
	// the e2e suite needs its older pin first (TestMPIOperator runs before
	// TestTrainer), which matters when this builds behind the tests (run
	// --build-behind).
	parts := []Part{kubernetesPart(c.Pins.Kubernetes), coreDNSPart(c.Pins.CoreDNS), registryPart(c.Pins.Registry), helmPart(c.Pins.Helm)}
	for _, v := range mpiops {
		parts = append(parts, mpiOperatorPart(v))
	}
	for _, v := range trainers {
		jsv, err := c.B.RequiredVersion(ctx, TrainerModule, v, JobSetModule)
		if err != nil {
			return err
		}
		parts = append(parts, trainerPart(v), jobSetPart(jsv))
	}
	parts = append(parts, kueuePart(c.Pins.Kueue), kubeRouterPart(c.Pins.KubeRouter))
	steps, err := c.partSteps(ctx, parts)
	if err != nil {
		return err
	}
	var names []string
	for _, p := range parts {
		names = append(names, p.Key())
	}
	return c.startBuilds(ctx, buildLanes, steps).wait(ctx, names...)
}

// parallel runs fns side by side and returns their errors joined.
func parallel(fns ...func() error) error {
	errs := make(chan error, len(fns))
	for _, fn := range fns {
		go func() { errs <- fn() }()
	}
	var all []error
	for range fns {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}
