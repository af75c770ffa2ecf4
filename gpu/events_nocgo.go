//go:build !cgo

package gpu

import (
	"context"
	"errors"
)

type noEvents struct{}

// NewNVMLEventWatcher returns the NVML event watcher. This binary was built
// without cgo, so NVML cannot be loaded: Watch fails at once. Options are
// accepted and ignored.
func NewNVMLEventWatcher(opts ...Option) EventWatcher {
	_ = newOptions(opts)
	return noEvents{}
}

func (noEvents) Watch(context.Context, []Device, func(Event)) error {
	return errors.New("watching GPU events: " + ReasonNoCgo)
}
