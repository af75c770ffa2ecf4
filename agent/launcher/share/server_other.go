//go:build !linux

package share

import (
	"errors"
	"log/slog"
)

// SocketName is the launcher's socket in its private directory.
const SocketName = "rsh.sock"

// Server serves relays' sessions; connection sharing works on Linux only.
type Server struct{}

// Serve reports that connection sharing works on Linux only.
func Serve(string, *Pool, *slog.Logger) (*Server, error) {
	return nil, errors.New("connection sharing works on Linux only")
}

// Path is the socket's path.
func (s *Server) Path() string { return "" }

// Token is the run's token.
func (s *Server) Token() string { return "" }

// Close does nothing.
func (s *Server) Close() {}
