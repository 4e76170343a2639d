package cliflag

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// ListenAddr combines a --listen value and a --port value into host:port.
// --listen may carry its own port, but then --port must not be given too:
// two ports is a mistake to report, not a precedence rule to remember.
// --port must be 0-65535 (0: the system picks a free one).
func ListenAddr(listen string, port int, portSet bool) (string, error) {
	if port < 0 || port > 65535 {
		return "", fmt.Errorf("--port %d: want 0-65535", port)
	}
	if listen == "" {
		return "", errors.New("--listen: empty address")
	}
	if host, p, err := net.SplitHostPort(listen); err == nil {
		if portSet {
			return "", fmt.Errorf("--listen %s has a port and --port is given too: use one", listen)
		}
		if _, err := strconv.ParseUint(p, 10, 16); err != nil {
			return "", fmt.Errorf("--listen %s: bad port %q", listen, p)
		}
		return net.JoinHostPort(host, p), nil
	}
	// A bare host; IPv6 may come with or without brackets.
	host := strings.TrimSuffix(strings.TrimPrefix(listen, "["), "]")
	return net.JoinHostPort(host, strconv.Itoa(port)), nil
}
