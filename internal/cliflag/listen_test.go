package cliflag

import (
	"testing"

	"gotest.tools/v3/assert"
)

func TestListenAddr(t *testing.T) {
	for _, tc := range []struct {
		listen  string
		port    int
		portSet bool
		want    string
		err     string
	}{
		{"127.0.0.1", 9200, false, "127.0.0.1:9200", ""},
		{"0.0.0.0:9300", 9200, false, "0.0.0.0:9300", ""},
		{"::1", 9200, false, "[::1]:9200", ""},
		{"0.0.0.0", 80, true, "0.0.0.0:80", ""},
		{"localhost:7000", 9201, false, "localhost:7000", ""},
		{"[::1]:7000", 9201, false, "[::1]:7000", ""},
		{"[::1]", 9200, true, "[::1]:9200", ""},
		{"127.0.0.1:9300", 9200, true, "", "--port is given too"},
		{"127.0.0.1:http", 9200, false, "", "bad port"},
		{"", 9200, false, "", "empty address"},
		{"127.0.0.1", 65536, true, "", "--port 65536: want 0-65535"},
		{"127.0.0.1", -1, true, "", "--port -1: want 0-65535"},
	} {
		got, err := ListenAddr(tc.listen, tc.port, tc.portSet)
		if tc.err != "" {
			assert.ErrorContains(t, err, tc.err, tc.listen)
			continue
		}
		assert.NilError(t, err, tc.listen)
		assert.Equal(t, got, tc.want)
	}
}
