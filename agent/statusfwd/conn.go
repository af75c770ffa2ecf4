package statusfwd

import (
	"io"
	"net"

	"golang.org/x/crypto/ssh"
)

// ChannelConn is ch as a net.Conn with real deadlines, as an http.Server
// or client needs them: a channel has none, so the conn is one end of a
// pipe (net.Pipe, which has them) whose other end two goroutines copy to
// and from ch. A Read or Write past its deadline fails with
// os.ErrDeadlineExceeded and may be retried after the deadline moves, as
// on TCP; the channel stays open. Close closes the channel. When the peer
// ends its side of the channel, the conn ends both ways (the requests it
// carries never half-close). local and remote name the ends.
func ChannelConn(ch ssh.Channel, local, remote net.Addr) net.Conn {
	user, end := net.Pipe()
	go func() {
		_, _ = io.Copy(end, ch)
		end.Close()
	}()
	go func() {
		_, _ = io.Copy(ch, end)
		end.Close()
		ch.Close()
	}()
	return &channelConn{Conn: user, local: local, remote: remote}
}

type channelConn struct {
	net.Conn
	local, remote net.Addr
}

func (c *channelConn) LocalAddr() net.Addr  { return c.local }
func (c *channelConn) RemoteAddr() net.Addr { return c.remote }

// Addr names one end of a channel: the launcher's, or a worker's host.
type Addr string

func (a Addr) Network() string { return "ssh" }
func (a Addr) String() string  { return string(a) }
