package relay

import (
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"strings"
)

// ClientOrgs binds client certificates to the institutions they may send
// as (SPEC 5.9): mTLS says who a channel is, this says what it may do. A
// rule names one field of the certificate's subject or its DNS names and
// the SRC_ORG values a certificate carrying that value may send; a
// certificate may send the SRC_ORGs of every rule it matches, and no other.
// A frame with another SRC_ORG is answered E102 and never sent. A nil
// *ClientOrgs binds nothing (the default).
type ClientOrgs struct {
	rules []orgRule
}

type orgRule struct {
	field, value string // O, OU, CN or DNS, and the value it must have
	orgs         []string
}

// clientOrgFields are the certificate fields a rule may name.
var clientOrgFields = map[string]func(*x509.Certificate) []string{
	"O":   func(c *x509.Certificate) []string { return c.Subject.Organization },
	"OU":  func(c *x509.Certificate) []string { return c.Subject.OrganizationalUnit },
	"CN":  func(c *x509.Certificate) []string { return []string{c.Subject.CommonName} },
	"DNS": func(c *x509.Certificate) []string { return c.DNSNames },
}

// ParseClientOrgs parses rules as --tls-client-org takes them:
// FIELD=VALUE:ORG[,ORG…], separated by ';' or newlines, e.g.
// "O=Bank A:081,082;OU=atm-fleet:081". "@FILE" reads them from FILE (#
// comments allowed), which then must be the whole value.
func ParseClientOrgs(spec string) (*ClientOrgs, error) {
	if name, ok := strings.CutPrefix(strings.TrimSpace(spec), "@"); ok {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		spec = string(b)
	}
	co := &ClientOrgs{}
	for line := range strings.FieldsFuncSeq(spec, func(r rune) bool { return r == ';' || r == '\n' }) {
		line, _, _ = strings.Cut(line, "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ':')
		if i < 0 {
			return nil, fmt.Errorf("%q: want FIELD=VALUE:ORG[,ORG…]", line)
		}
		field, value, ok := strings.Cut(line[:i], "=")
		field = strings.ToUpper(strings.TrimSpace(field))
		if _, known := clientOrgFields[field]; !ok || !known || strings.TrimSpace(value) == "" {
			return nil, fmt.Errorf("%q: want FIELD=VALUE:ORG[,ORG…] with FIELD one of O, OU, CN, DNS", line)
		}
		r := orgRule{field: field, value: strings.TrimSpace(value)}
		for org := range strings.SplitSeq(line[i+1:], ",") {
			org = strings.TrimSpace(org)
			if org == "" {
				return nil, fmt.Errorf("%q: an empty SRC_ORG", line)
			}
			r.orgs = append(r.orgs, org)
		}
		co.rules = append(co.rules, r)
	}
	if len(co.rules) == 0 {
		return nil, fmt.Errorf("%q: no rule", spec)
	}
	return co, nil
}

// orgsFor is the set of SRC_ORGs cert may send as (empty when it matches
// no rule, or when there is no certificate).
func (co *ClientOrgs) orgsFor(cert *x509.Certificate) map[string]bool {
	out := map[string]bool{}
	if cert == nil {
		return out
	}
	for _, r := range co.rules {
		if slices.Contains(clientOrgFields[r.field](cert), r.value) {
			for _, o := range r.orgs {
				out[o] = true
			}
		}
	}
	return out
}
