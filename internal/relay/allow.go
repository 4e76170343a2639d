package relay

import (
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// allowed reports whether nc comes from a network of Config.Allow (every
// address when the list is empty). A connection from elsewhere is closed
// before a byte is read from it or a TLS handshake starts, counted, and
// logged at most once a second with a running count, as a MaxConns refusal
// is: nothing it sent was read, so nothing was done.
func (s *Server) allowed(nc net.Conn) bool {
	if len(s.allow) == 0 {
		return true
	}
	addr := remoteAddr(nc)
	for _, p := range s.allow {
		if addr.IsValid() && p.Contains(addr) {
			return true
		}
	}
	n := s.notAllowed.Add(1)
	if s.metrics != nil {
		s.metrics.ConnNotAllowed()
	}
	// Counted and logged before the close, which is what the refused
	// side sees: whoever watches for it finds both done.
	if everySecond(&s.lastDenyLog) {
		s.log.Warn("connection refused: address not in --allow", "remote", nc.RemoteAddr().String(), "refused_total", n)
	}
	nc.Close()
	return false
}

// remoteAddr is nc's remote IP address, IPv4-mapped IPv6 unmapped so that
// an IPv4 network matches it; the zero Addr if it has none.
func remoteAddr(nc net.Conn) netip.Addr {
	if ta, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	ap, err := netip.ParseAddrPort(nc.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// NotAllowed returns how many connections Config.Allow has refused so far.
func (s *Server) NotAllowed() int64 { return s.notAllowed.Load() }

// ParseAllow parses a comma-separated list of networks (CIDR, or a bare
// address for one host), as --allow takes it. An IPv4-mapped IPv6 entry
// (::ffff:10.0.0.0/104) is taken as the IPv4 network it maps. A network with host bits set
// (10.1.2.3/8) is refused: it is more likely a typing mistake than meant.
func ParseAllow(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for item := range strings.SplitSeq(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("%q: empty network in the list", list)
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			a, aerr := netip.ParseAddr(item)
			if aerr != nil {
				return nil, fmt.Errorf("%q: want a CIDR network (10.0.0.0/8) or an address", item)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("%q: host bits set; did you mean %s?", item, p.Masked())
		}
		if p.Addr().Is4In6() {
			// Clients are matched by their unmapped address (remoteAddr),
			// so a mapped entry would never match an IPv4 client: take it
			// as the IPv4 network it names.
			if p.Bits() < 96 {
				return nil, fmt.Errorf("%q: an IPv4-mapped network must be /96 or longer; write the IPv4 network instead", item)
			}
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		out = append(out, p)
	}
	return out, nil
}
