//go:build !linux

package relay

// Run is never served outside Linux: the relay falls back.
func (c *Client) Run() (int, error) {
	return 0, &Unserved{Reason: "connection sharing works on Linux only"}
}
