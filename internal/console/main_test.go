package console

import (
	"testing"

	"lhrelay/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
