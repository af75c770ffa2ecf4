package cli

import (
	"context"
	"log/slog"
	"slices"
)

// uniqueKeys is a slog.Handler that gives every key at most once per
// record: an attribute added later (a sub-logger's With, the record's own
// attributes) replaces an earlier one of the same key instead of repeating
// it. slog's JSON handler writes keys as they come, so a component logger
// whose parts add "component" again would otherwise emit {"component":
// "launcher", ..., "component": "slots"}, which strict JSON parsers
// (Elasticsearch, OpenSearch) reject. Keys inside a group are compared
// within that group only.
type uniqueKeys struct {
	inner slog.Handler // with no attributes of ours applied
	attrs []slog.Attr  // from WithAttrs, unique by key
	group bool         // WithGroup was called: attrs went to inner
}

// UniqueKeys wraps h so that no record repeats a key (see uniqueKeys).
func UniqueKeys(h slog.Handler) slog.Handler { return &uniqueKeys{inner: h} }

func (u *uniqueKeys) Enabled(ctx context.Context, l slog.Level) bool { return u.inner.Enabled(ctx, l) }

func (u *uniqueKeys) WithAttrs(as []slog.Attr) slog.Handler {
	if u.group {
		return &uniqueKeys{inner: u.inner.WithAttrs(as), group: true}
	}
	return &uniqueKeys{inner: u.inner, attrs: merge(u.attrs, as)}
}

func (u *uniqueKeys) WithGroup(name string) slog.Handler {
	if name == "" {
		return u
	}
	return &uniqueKeys{inner: u.inner.WithAttrs(u.attrs).WithGroup(name), group: true}
}

func (u *uniqueKeys) Handle(ctx context.Context, r slog.Record) error {
	var own []slog.Attr
	r.Attrs(func(a slog.Attr) bool {
		own = append(own, a)
		return true
	})
	all := merge(u.attrs, own)
	if !u.group && len(all) == len(u.attrs)+len(own) && len(u.attrs) == 0 {
		return u.inner.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(all...)
	return u.inner.Handle(ctx, out)
}

// merge returns base followed by add, a key of add replacing the same key
// of base (in base's place) and of an earlier attribute of add.
func merge(base, add []slog.Attr) []slog.Attr {
	out := slices.Clone(base)
	for _, a := range add {
		if a.Key == "" {
			continue
		}
		if i := slices.IndexFunc(out, func(b slog.Attr) bool { return b.Key == a.Key }); i >= 0 {
			out[i] = a
			continue
		}
		out = append(out, a)
	}
	return out
}
