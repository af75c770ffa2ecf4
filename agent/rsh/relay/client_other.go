//go:build !linux

package relay

import (
	"os"
	"time"
)

// DefaultTimeout bounds a relay's handshake.
const DefaultTimeout = 10 * time.Second

// Client is one relay's session; sharing works on Linux only.
type Client struct {
	Socket  string
	Args    []string
	Env     []string
	Stdio   [3]int
	Signals <-chan os.Signal
	Release func()
	Started func()
	Timeout time.Duration
}

// Unserved is why a relay was not served; nothing ran.
type Unserved struct{ Reason string }

func (u *Unserved) Error() string { return "not served by the launcher: " + u.Reason }

// Run is never served outside Linux.
func (c *Client) Run() (int, error) {
	return 0, &Unserved{Reason: "connection sharing works on Linux only"}
}
