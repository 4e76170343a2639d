package main

import (
	"fmt"
	"strings"

	. "github.com/dave/jennifer/jen"

	"lhrelay/internal/fixedwidth"
)

// emitTransaction writes one transaction's file: the request and response
// body types with their fixed-width codecs and their JSON forms.
func (gn generator) emitTransaction(l *Layouts, tx *Transaction) *File {
	f := gn.newFile(tx.File)
	req := &codec{layout: tx.Code + " request", typ: tx.Code + "Request", recv: "r", fields: tx.Request.Fields, l: l}
	rsp := &codec{layout: tx.Code + " response", typ: tx.Code + "Response", recv: "r", fields: tx.Response.Fields, l: l}
	reqLen, rspLen := req.typ+"Len", rsp.typ+"Len"

	docComment(f, fmt.Sprintf("Body lengths of %s (%s).", tx.Code, tx.Title))
	f.Const().Defs(
		Id(reqLen).Op("=").Lit(tx.Request.Declared),
		Id(rspLen).Op("=").Lit(tx.Response.Declared),
	)
	emitGuard(f, "the header these frame offsets follow", Id("HeaderLen").Op("-").Lit(l.Header.Declared))

	for _, c := range []*codec{req, rsp} {
		lenConst, role, declared := reqLen, "request", tx.Request.Declared
		if c == rsp {
			lenConst, role, declared = rspLen, "response", tx.Response.Declared
		}
		c.emitStruct(f, fmt.Sprintf("%s is the %s body of %s (%s): %d bytes after the header.", c.typ, role, tx.Code, tx.Title, declared))
		c.emitGeometry(f, Id(lenConst))
		c.emitDecode(f, lenConst, fmt.Sprintf("Decode reads a %s body and checks every field against its kind.\nOn error the contents of %s are unspecified.", c.layout, c.recv))
		c.emitAppend(f, "AppendTo appends the body to dst. It refuses a value that does not fit its field.")
		c.emitJSON(f, role == "request")
		c.emitSet(f)
		c.emitFields(f)
		c.emitIdentity(f, tx.Code, role)
	}
	coreDoc := fmt.Sprintf("CorePath returns the path of the core call, %s %s, with the request's values filled in.", tx.Method, tx.Path)
	lookupOnly := lookupOnlyFields(tx)
	if len(lookupOnly) > 0 {
		coreDoc += fmt.Sprintf("\nIt also refuses a value that could not fill its segment of the lookup path, GET %s:\na request that could not be looked up is never sent.", tx.Lookup.Path)
	}
	req.emitPath(f, "CorePath", coreDoc, tx.Path, false, lookupOnly)
	if tx.Lookup.None {
		docComment(f, fmt.Sprintf("LookupPath fails: %s declares lookup none (a read, settled as never posted without asking the core).", tx.Code))
		f.Func().Params(Id("r").Op("*").Id(req.typ)).Id("LookupPath").Params(Id("guid").String()).Params(String(), Error()).Block(
			Return(Lit(""), Id("ErrNoLookup")),
		)
	} else {
		req.emitPath(f, "LookupPath", fmt.Sprintf("LookupPath returns the path of the lookup that settles an unknown outcome, GET %s, for the request with header GUID guid.", tx.Lookup.Path), tx.Lookup.Path, true, nil)
	}
	return f
}

// lookupOnlyFields are the request fields that fill a segment of the lookup
// path and none of the core path, in the lookup path's order. The relay
// checks the core path before it calls the core (CorePath), so CorePath
// checks these too: a request whose lookup could not be built would be
// sent and, if its outcome were unknown, never settled.
func lookupOnlyFields(tx *Transaction) []*Field {
	if tx.Lookup.None {
		return nil
	}
	inCore := map[string]bool{}
	for _, m := range pathParam.FindAllStringSubmatch(tx.Path, -1) {
		inCore[m[1]] = true
	}
	var out []*Field
	for _, m := range pathParam.FindAllStringSubmatch(tx.Lookup.Path, -1) {
		if m[1] == "guid" || inCore[m[1]] {
			continue
		}
		inCore[m[1]] = true // once, however often the lookup names it
		for _, fd := range tx.Request.Fields {
			if fd.JSON == m[1] {
				out = append(out, fd)
			}
		}
	}
	return out
}

// emitIdentity emits TxCode and Flag: which transaction a body belongs to
// and which header FLAG it travels with, so that AppendFrame can refuse a
// body in another transaction's frame.
func (c *codec) emitIdentity(f *File, code, role string) {
	flag := "FlagRequest"
	if role == "response" {
		flag = "FlagResponse"
	}
	docComment(f, fmt.Sprintf("TxCode is %s: the TX_CODE of the frames this body travels in.", code))
	f.Func().Params(Op("*").Id(c.typ)).Id("TxCode").Params().String().Block(Return(Lit(code)))
	docComment(f, fmt.Sprintf("Flag is %s: this is a %s body.", flag, role))
	f.Func().Params(Op("*").Id(c.typ)).Id("Flag").Params().String().Block(Return(Id(flag)))
}

// emitGuard emits a compile-time check that expr is zero: generated files
// built from different versions of the layouts do not compile together.
func emitGuard(f *File, what string, exprs ...Code) {
	docComment(f, "Compile-time guard on "+what+": regenerate with go generate ./... if this fails to build.")
	f.Func().Id("_").Params().BlockFunc(func(g *Group) {
		g.Var().Id("x").Index(Lit(1)).Struct()
		for _, e := range exprs {
			g.Id("_").Op("=").Id("x").Index(e)
		}
	})
}

func lowerFirst(s string) string { return strings.ToLower(s[:1]) + s[1:] }

// unexported lowers a type name's leading word: BKTR0001Request → bktr0001Request.
func unexported(s string) string {
	for i := 1; i < len(s); i++ {
		if s[i] >= 'a' && s[i] <= 'z' {
			return strings.ToLower(s[:i-1]) + s[i-1:]
		}
	}
	return strings.ToLower(s)
}

// jsonInt reports whether a field is an integer in the core's JSON; every
// other field is a string.
func jsonInt(f *Field) bool { return f.Kind == fixedwidth.Numeric && !f.String }

// rawLit is a raw string literal, `like this`, for the JSON text the
// codecs write: easier to read than a quoted one full of \".
func rawLit(s string) *Statement { return Op("`" + s + "`") }

// jsonMax is the longest JSON value of a field whose string needs no
// escaping: room enough for the usual body, not a bound.
func (c *codec) jsonMax(f *Field) int {
	switch {
	case jsonInt(f):
		return len("-9223372036854775808")
	case f.Kind == fixedwidth.Code:
		n := 0
		for _, e := range c.l.Maps[f.Map].Entries {
			n = max(n, len(e.Core))
		}
		return n + 2
	}
	return f.Len + 2
}

// emitJSON emits the body's JSON form, SPEC §3, written and read without
// reflection (internal/corejson), code maps applied both ways (wire code ↔
// core id): AppendCoreJSON and CoreJSON write it, FromCoreJSON reads it.
func (c *codec) emitJSON(f *File, request bool) {
	keysVar := unexported(c.typ) + "Keys"
	maxConst := unexported(c.typ) + "JSONMax"
	var keys []Code
	size := len("{}")
	if request {
		keys = append(keys, Lit("guid"))
		size += len(`"guid":,`)
	}
	for _, fd := range c.fields {
		keys = append(keys, Lit(fd.JSON))
		size += len(fd.JSON) + len(`"":,`) + c.jsonMax(fd)
	}
	what := "its fields"
	if request {
		what = "guid, then its fields"
	}
	docComment(f, fmt.Sprintf("%s are the keys of a %s in the core's JSON: %s in layout order.", keysVar, c.layout, what))
	f.Var().Id(keysVar).Op("=").Index(Op("...")).String().Values(keys...)
	guidNote := ""
	if request {
		guidNote = ", guid aside"
	}
	docComment(f, fmt.Sprintf("%s is the longest core JSON of a %s whose strings need no escaping%s: the buffer CoreJSON allocates.", maxConst, c.layout, guidNote))
	f.Const().Id(maxConst).Op("=").Lit(size)

	// AppendCoreJSON: code maps first, so that a refusal appends nothing.
	params := []Code{Id("dst").Index().Byte()}
	doc := "AppendCoreJSON appends the body in the core's JSON to dst, code maps applied.\nOn error it returns dst unchanged."
	if request {
		params = append(params, Id("guid").String())
		doc = "AppendCoreJSON appends the request in the core's JSON to dst, with guid, code maps applied.\nOn error it returns dst unchanged."
	}
	docComment(f, doc)
	f.Func().Params(Id("r").Op("*").Id(c.typ)).Id("AppendCoreJSON").Params(params...).Params(Index().Byte(), Error()).BlockFunc(func(g *Group) {
		names := newLocals("r", "dst", "guid", "ok")
		coreID := map[*Field]string{}
		for _, fd := range c.fields {
			if fd.Kind != fixedwidth.Code {
				continue
			}
			v := names.name(lowerFirst(goName(fd.Name)))
			coreID[fd] = v
			g.List(Id(v), Id("ok")).Op(":=").Id(mapFunc(fd.Map, "ToCore")).Call(c.member(fd))
			g.If(Op("!").Id("ok")).Block(Return(Id("dst"), c.fieldError(fd, c.member(fd), "not a code of map "+fd.Map)))
		}
		sep := "{"
		if request {
			g.Id("dst").Op("=").Append(Id("dst"), rawLit(`{"guid":`).Op("..."))
			g.Id("dst").Op("=").Qual(cj, "AppendString").Call(Id("dst"), Id("guid"))
			sep = ","
		}
		for _, fd := range c.fields {
			g.Id("dst").Op("=").Append(Id("dst"), rawLit(sep+`"`+fd.JSON+`":`).Op("..."))
			sep = ","
			switch {
			case jsonInt(fd):
				g.Id("dst").Op("=").Qual("strconv", "AppendInt").Call(Id("dst"), c.member(fd), Lit(10))
			case fd.Kind == fixedwidth.Code:
				g.Id("dst").Op("=").Qual(cj, "AppendString").Call(Id("dst"), Id(coreID[fd]))
			default:
				g.Id("dst").Op("=").Qual(cj, "AppendString").Call(Id("dst"), c.member(fd))
			}
		}
		if len(c.fields) == 0 && !request {
			g.Id("dst").Op("=").Append(Id("dst"), Op("'{'"))
		}
		g.Return(Append(Id("dst"), Op("'}'")), Nil())
	})

	params, args := []Code{}, []Code{Make(Index().Byte(), Lit(0), Id(maxConst))}
	doc = "CoreJSON returns the body in the core's JSON, code maps applied."
	if request {
		params = append(params, Id("guid").String())
		args = []Code{Make(Index().Byte(), Lit(0), Id(maxConst).Op("+").Len(Id("guid"))), Id("guid")}
		doc = "CoreJSON returns the request in the core's JSON with guid, code maps applied."
	}
	docComment(f, doc)
	f.Func().Params(Id("r").Op("*").Id(c.typ)).Id("CoreJSON").Params(params...).Params(Index().Byte(), Error()).Block(
		List(Id("data"), Err()).Op(":=").Id("r").Dot("AppendCoreJSON").Call(args...),
		If(Err().Op("!=").Nil()).Block(Return(Nil(), Err())),
		Return(Id("data"), Nil()),
	)

	ret := []Code{Error()}
	doc = "FromCoreJSON sets the body from the core's JSON, mapping core ids back to wire codes.\nEvery key of the layout must be present. Values are checked when the body is encoded.\nOn error r is left as it was."
	if request {
		ret = []Code{String(), Error()}
		doc = "FromCoreJSON sets the request from the core's JSON and returns its guid, mapping core ids\nback to wire codes. Every key of the layout must be present. Values are checked when it is encoded.\nOn error r is left as it was."
	}
	fail := func(format string, args ...Code) Code {
		e := Qual("fmt", "Errorf").Call(append([]Code{Lit(c.layout + ": core JSON: " + format)}, args...)...)
		if request {
			return Return(Lit(""), e)
		}
		return Return(e)
	}
	docComment(f, doc)
	f.Func().Params(Id("r").Op("*").Id(c.typ)).Id("FromCoreJSON").Params(Id("data").Index().Byte()).Params(ret...).BlockFunc(func(g *Group) {
		g.Var().DefsFunc(func(vg *Group) {
			vg.Id("j").Id(c.typ).Comment("code fields hold the core's ids until mapped")
			if request {
				vg.Id("guid").String()
			}
			vg.Id("present").Index(Len(Id(keysVar))).Bool().Comment("null counts as absent")
		})
		g.Id("d").Op(":=").Qual(cj, "NewDecoder").Call(Id("data"))
		g.For(Id("d").Dot("Next").Call()).Block(
			Switch(Id("i").Op(":=").Id("d").Dot("Match").Call(Id(keysVar).Index(Op(":"))), Id("i")).BlockFunc(func(sg *Group) {
				k := 0
				if request {
					sg.Case(Lit(0)).Block(List(Id("guid"), Id("present").Index(Id("i"))).Op("=").Id("d").Dot("String").Call())
					k = 1
				}
				for _, fd := range c.fields {
					read := "String"
					if jsonInt(fd) {
						read = "Int"
					}
					sg.Case(Lit(k)).Block(List(Id("j").Dot(goName(fd.Name)), Id("present").Index(Id("i"))).Op("=").Id("d").Dot(read).Call())
					k++
				}
				sg.Default().Block(Id("d").Dot("Skip").Call())
			}),
		)
		g.If(Err().Op(":=").Id("d").Dot("Err").Call(), Err().Op("!=").Nil()).Block(fail("%w", Err()))
		g.For(List(Id("i"), Id("ok")).Op(":=").Range().Id("present")).Block(
			If(Op("!").Id("ok")).Block(fail("missing key %s", Id(keysVar).Index(Id("i")))),
		)
		for _, fd := range c.fields {
			if fd.Kind != fixedwidth.Code {
				continue
			}
			m := Id("j").Dot(goName(fd.Name))
			g.If(List(Id("code"), Id("ok")).Op(":=").Id(mapFunc(fd.Map, "FromCore")).Call(m), Id("ok")).Block(
				m.Clone().Op("=").Id("code"),
			).Else().Block(fail(fd.JSON+": %q is not in code map "+fd.Map, m))
		}
		g.Op("*").Id("r").Op("=").Id("j")
		if request {
			g.Return(Id("guid"), Nil())
		} else {
			g.Return(Nil())
		}
	})
}

// emitSet emits Set(key, value), which fills a field from its text form by
// JSON key: the generic way for a client to build a body from flags.
func (c *codec) emitSet(f *File) {
	keys := make([]string, len(c.fields))
	for i, fd := range c.fields {
		keys[i] = fd.JSON
	}
	docComment(f, "Set assigns the field with the given JSON key from its text form: a decimal\ninteger for numeric fields, the wire code or the core's id for code fields.\nValues are checked when the body is encoded.")
	f.Func().Params(Id("r").Op("*").Id(c.typ)).Id("Set").Params(Id("key"), Id("value").String()).Error().BlockFunc(func(g *Group) {
		noField := Return(Qual("fmt", "Errorf").Call(
			Lit(c.layout+": no field with JSON key %q (fields: "+strings.Join(keys, ", ")+")"), Id("key")))
		if len(c.fields) == 0 {
			g.Add(noField)
			return
		}
		g.Switch(Id("key")).BlockFunc(func(sg *Group) {
			for _, fd := range c.fields {
				m := c.member(fd)
				sg.Case(Lit(fd.JSON)).BlockFunc(func(cg *Group) {
					switch {
					case fd.Kind == fixedwidth.Numeric && !fd.String:
						cg.List(Id("v"), Err()).Op(":=").Qual("strconv", "ParseInt").Call(Id("value"), Lit(10), Lit(64))
						cg.If(Err().Op("!=").Nil()).Block(Return(Qual("fmt", "Errorf").Call(
							Lit(c.layout+": "+fd.JSON+": %q is not an integer"), Id("value"))))
						cg.Add(m).Op("=").Id("v")
					case fd.Kind == fixedwidth.Code:
						cg.If(List(Id("code"), Id("ok")).Op(":=").Id(mapFunc(fd.Map, "FromCore")).Call(Id("value")), Id("ok")).Block(
							Id("value").Op("=").Id("code"))
						cg.Add(m).Op("=").Id("value")
					default:
						cg.Add(m).Op("=").Id("value")
					}
				})
			}
			sg.Default().Block(noField)
		})
		g.Return(Nil())
	})
}

// emitFields emits Fields, the body's values in layout order for display,
// and AppendFields, the same without formatting a number, for a caller
// that must not allocate (the relay's log line).
func (c *codec) emitFields(f *File) {
	value := func(fd *Field, format bool) []Code {
		items := []Code{Id("Name").Op(":").Lit(fd.Name), Id("JSON").Op(":").Lit(fd.JSON)}
		switch {
		case jsonInt(fd) && format:
			items = append(items, Id("Value").Op(":").Qual("strconv", "FormatInt").Call(c.member(fd), Lit(10)),
				Id("Int").Op(":").Add(c.member(fd)), Id("Integer").Op(":").True())
		case jsonInt(fd):
			items = append(items, Id("Int").Op(":").Add(c.member(fd)), Id("Integer").Op(":").True())
		default:
			items = append(items, Id("Value").Op(":").Add(c.member(fd)))
		}
		if fd.Account {
			items = append(items, Id("Account").Op(":").True())
		}
		return items
	}
	docComment(f, "Fields lists the body's values in layout order, for display.")
	f.Func().Params(Id("r").Op("*").Id(c.typ)).Id("Fields").Params().Index().Id("FieldValue").Block(
		Return(Index().Id("FieldValue").CustomFunc(multiLine, func(g *Group) {
			for _, fd := range c.fields {
				g.Values(value(fd, true)...)
			}
		})),
	)
	docComment(f, "AppendFields appends the body's values in layout order to dst, as Fields lists them\nbut without formatting a number: an Integer field's Value is empty, its value is Int.")
	appended := Id("append").CustomFunc(Options{Open: "(dst,", Close: ")", Separator: ",", Multi: true}, func(g *Group) {
		for _, fd := range c.fields {
			g.Id("FieldValue").Values(value(fd, false)...)
		}
	})
	if len(c.fields) == 0 {
		appended = Id("dst") // a body of no field appends nothing
	}
	f.Func().Params(Id("r").Op("*").Id(c.typ)).Id("AppendFields").Params(Id("dst").Index().Id("FieldValue")).Index().Id("FieldValue").Block(
		Return(appended),
	)
}

// emitPath emits a method returning a core URL path: template with the
// request's values in place of its {parameters}, each in the text the
// core's JSON carries (an integer's decimal digits, a code's core id, text
// as it is), path-escaped; with withGUID the method's guid argument fills
// {guid}. Each value must address exactly one segment
// (fixedwidth.PathSegment): an empty value or a dot segment is the field's
// error, a bad frame (SPEC 2). The header GUID is 32 hex digits by then.
// alsoCheck are fields that fill a segment of another path (the lookup's)
// and not of this one: a value of theirs that could not fill it is
// refused here too.
func (c *codec) emitPath(f *File, name, doc, template string, withGUID bool, alsoCheck []*Field) {
	docComment(f, doc)
	params := []Code{}
	if withGUID {
		params = append(params, Id("guid").String())
	}
	f.Func().Params(Id("r").Op("*").Id(c.typ)).Id(name).Params(params...).Params(String(), Error()).BlockFunc(func(g *Group) {
		names := newLocals("r", "guid", "ok")
		segs := map[*Field]string{} // a parameter named twice is filled once
		var parts []Code
		rest := template
		for {
			loc := pathParam.FindStringSubmatchIndex(rest)
			if loc == nil {
				break
			}
			if loc[0] > 0 {
				parts = append(parts, Lit(rest[:loc[0]]))
			}
			key := rest[loc[2]:loc[3]]
			rest = rest[loc[1]:]
			if withGUID && key == "guid" {
				parts = append(parts, Qual("net/url", "PathEscape").Call(Id("guid")))
				continue
			}
			fd := c.byJSON(key)
			seg, done := segs[fd]
			if !done {
				text, got := c.segmentText(g, fd, names)
				seg = names.name(lowerFirst(goName(fd.Name)) + "Seg")
				segs[fd] = seg
				g.List(Id(seg), Id("ok")).Op(":=").Qual(fw, "PathSegment").Call(text)
				g.If(Op("!").Id("ok")).Block(Return(Lit(""), c.fieldError(fd, got, "does not address one path segment (empty, . or ..)")))
			}
			parts = append(parts, Id(seg))
		}
		for _, fd := range alsoCheck {
			text, got := c.segmentText(g, fd, names)
			g.If(Op("!").Qual(fw, "OneSegment").Call(text)).Block(Return(Lit(""),
				c.fieldError(fd, got, "does not address one segment of the lookup path (empty, . or ..): a request that could not be looked up is never sent")))
		}
		if rest != "" || len(parts) == 0 {
			parts = append(parts, Lit(rest))
		}
		expr := parts[0]
		for _, p := range parts[1:] {
			expr = Add(expr).Op("+").Add(p)
		}
		g.Return(expr, Nil())
	})
}

// segmentText emits what it takes to have field fd's value in the text the
// core's JSON carries it in, and returns that text and the value a
// FieldError reports (the field's own value when it is a string, so that a
// code is named by its wire code).
func (c *codec) segmentText(g *Group, fd *Field, names locals) (text, got Code) {
	switch {
	case fd.Kind == fixedwidth.Code:
		v := names.name(lowerFirst(goName(fd.Name)))
		g.List(Id(v), Id("ok")).Op(":=").Id(mapFunc(fd.Map, "ToCore")).Call(c.member(fd))
		g.If(Op("!").Id("ok")).Block(Return(Lit(""), c.fieldError(fd, c.member(fd), "not a code of map "+fd.Map)))
		return Id(v), c.member(fd)
	case jsonInt(fd):
		return Qual("strconv", "FormatInt").Call(c.member(fd), Lit(10)), Qual("strconv", "FormatInt").Call(c.member(fd), Lit(10))
	}
	return c.member(fd), c.member(fd)
}

// byJSON is the field with JSON key key; validation has made sure there is one.
func (c *codec) byJSON(key string) *Field {
	for _, fd := range c.fields {
		if fd.JSON == key {
			return fd
		}
	}
	panic("gen: no field with JSON key " + key)
}

func (c *codec) hasCode() bool {
	for _, fd := range c.fields {
		if fd.Kind == fixedwidth.Code {
			return true
		}
	}
	return false
}
