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
	req.emitPath(f, "CorePath", fmt.Sprintf("CorePath returns the path of the core call, %s %s, with the request's values filled in.", tx.Method, tx.Path), tx.Path, false)
	if tx.Lookup.None {
		docComment(f, fmt.Sprintf("LookupPath fails: %s declares lookup none (a read, settled as never posted without asking the core).", tx.Code))
		f.Func().Params(Id("r").Op("*").Id(req.typ)).Id("LookupPath").Params(Id("guid").String()).Params(String(), Error()).Block(
			Return(Lit(""), Id("ErrNoLookup")),
		)
	} else {
		req.emitPath(f, "LookupPath", fmt.Sprintf("LookupPath returns the path of the lookup that settles an unknown outcome, GET %s, for the request with header GUID guid.", tx.Lookup.Path), tx.Lookup.Path, true)
	}
	return f
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

// jsonType is the Go type of a field in the core's JSON.
func jsonType(f *Field) Code {
	if f.Kind == fixedwidth.Numeric && !f.String {
		return Op("*").Int64()
	}
	return Op("*").String()
}

// emitJSON emits the JSON form of a body and the conversions both ways,
// applying code maps (wire code ↔ core id).
func (c *codec) emitJSON(f *File, request bool) {
	jt := unexported(c.typ) + "JSON"
	docComment(f, fmt.Sprintf("%s is the core's JSON form of a %s. Pointers tell a missing key from a zero value.", jt, c.layout))
	f.Type().Id(jt).StructFunc(func(g *Group) {
		if request {
			g.Id("GUID").Op("*").String().Tag(map[string]string{"json": "guid"})
		}
		for _, fd := range c.fields {
			g.Id(goName(fd.Name)).Add(jsonType(fd)).Tag(map[string]string{"json": fd.JSON})
		}
	})

	params, ret := []Code{}, []Code{Index().Byte(), Error()}
	doc := "CoreJSON returns the body in the core's JSON, code maps applied."
	if request {
		params = append(params, Id("guid").String())
		doc = "CoreJSON returns the request in the core's JSON with guid, code maps applied."
	}
	docComment(f, doc)
	f.Func().Params(Id("r").Op("*").Id(c.typ)).Id("CoreJSON").Params(params...).Params(ret...).BlockFunc(func(g *Group) {
		g.Id("j").Op(":=").Id(jt).ValuesFunc(func(vg *Group) {
			if request {
				vg.Id("GUID").Op(":").Op("&").Id("guid")
			}
			for _, fd := range c.fields {
				if fd.Kind != fixedwidth.Code {
					vg.Id(goName(fd.Name)).Op(":").Op("&").Add(c.member(fd))
				}
			}
		})
		for _, fd := range c.fields {
			if fd.Kind != fixedwidth.Code {
				continue
			}
			v := lowerFirst(goName(fd.Name))
			g.List(Id(v), Id("ok")).Op(":=").Id(mapFunc(fd.Map, "ToCore")).Call(c.member(fd))
			g.If(Op("!").Id("ok")).Block(Return(Nil(), c.fieldError(fd, c.member(fd), "not a code of map "+fd.Map)))
			g.Id("j").Dot(goName(fd.Name)).Op("=").Op("&").Id(v)
		}
		g.Return(Qual("encoding/json", "Marshal").Call(Id("j")))
	})

	ret = []Code{Error()}
	doc = "FromCoreJSON sets the body from the core's JSON, mapping core ids back to wire codes.\nEvery key of the layout must be present. Values are checked when the body is encoded."
	if request {
		ret = []Code{String(), Error()}
		doc = "FromCoreJSON sets the request from the core's JSON and returns its guid, mapping core ids\nback to wire codes. Every key of the layout must be present. Values are checked when it is encoded."
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
		g.Var().Id("j").Id(jt)
		if c.hasCode() {
			g.Var().Id("ok").Bool()
		}
		g.If(Err().Op(":=").Qual("encoding/json", "Unmarshal").Call(Id("data"), Op("&").Id("j")), Err().Op("!=").Nil()).Block(
			fail("%w", Err()))
		if request {
			g.If(Id("j").Dot("GUID").Op("==").Nil()).Block(fail("missing key guid"))
		}
		for _, fd := range c.fields {
			g.If(Id("j").Dot(goName(fd.Name)).Op("==").Nil()).Block(fail("missing key " + fd.JSON))
		}
		for _, fd := range c.fields {
			src := Op("*").Id("j").Dot(goName(fd.Name))
			if fd.Kind == fixedwidth.Code {
				g.If(List(c.member(fd), Id("ok")).Op("=").Id(mapFunc(fd.Map, "FromCore")).Call(src), Op("!").Id("ok")).Block(
					fail(fd.JSON+": %q is not in code map "+fd.Map, Op("*").Id("j").Dot(goName(fd.Name))))
				continue
			}
			g.Add(c.member(fd)).Op("=").Add(src)
		}
		if request {
			g.Return(Op("*").Id("j").Dot("GUID"), Nil())
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
			sg.Default().Block(Return(Qual("fmt", "Errorf").Call(
				Lit(c.layout+": no field with JSON key %q (fields: "+strings.Join(keys, ", ")+")"), Id("key"))))
		})
		g.Return(Nil())
	})
}

// emitFields emits Fields(), the body's values in layout order for display.
func (c *codec) emitFields(f *File) {
	docComment(f, "Fields lists the body's values in layout order, for display.")
	f.Func().Params(Id("r").Op("*").Id(c.typ)).Id("Fields").Params().Index().Id("FieldValue").Block(
		Return(Index().Id("FieldValue").CustomFunc(multiLine, func(g *Group) {
			for _, fd := range c.fields {
				val := Code(c.member(fd))
				if fd.Kind == fixedwidth.Numeric && !fd.String {
					val = Qual("strconv", "FormatInt").Call(c.member(fd), Lit(10))
				}
				items := []Code{
					Id("Name").Op(":").Lit(fd.Name), Id("JSON").Op(":").Lit(fd.JSON), Id("Value").Op(":").Add(val),
				}
				if fd.Account {
					items = append(items, Id("Account").Op(":").True())
				}
				g.Values(items...)
			}
		})),
	)
}

// emitPath emits a method returning a core URL path: template with the
// request's values (code maps applied, path-escaped) in place of its
// {parameters}, and with withGUID the method's guid argument for {guid}.
// Each value must address exactly one segment (fixedwidth.PathSegment):
// an empty value or a dot segment is the field's error, a bad frame
// (SPEC 2). The header GUID is 32 hex digits by then.
func (c *codec) emitPath(f *File, name, doc, template string, withGUID bool) {
	docComment(f, doc)
	params := []Code{}
	if withGUID {
		params = append(params, Id("guid").String())
	}
	f.Func().Params(Id("r").Op("*").Id(c.typ)).Id(name).Params(params...).Params(String(), Error()).BlockFunc(func(g *Group) {
		byKey := map[string]*Field{}
		for _, fd := range c.fields {
			byKey[fd.JSON] = fd
		}
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
			if withGUID && key == "guid" {
				parts = append(parts, Qual("net/url", "PathEscape").Call(Id("guid")))
				rest = rest[loc[1]:]
				continue
			}
			fd := byKey[key]
			var val Code = c.member(fd)
			switch {
			case fd.Kind == fixedwidth.Code:
				v := lowerFirst(goName(fd.Name))
				g.List(Id(v), Id("ok")).Op(":=").Id(mapFunc(fd.Map, "ToCore")).Call(c.member(fd))
				g.If(Op("!").Id("ok")).Block(Return(Lit(""), c.fieldError(fd, c.member(fd), "not a code of map "+fd.Map)))
				val = Id(v)
			case fd.Kind == fixedwidth.Numeric && !fd.String:
				val = Qual("strconv", "FormatInt").Call(c.member(fd), Lit(10))
			}
			seg := lowerFirst(goName(fd.Name)) + "Seg"
			g.List(Id(seg), Id("ok")).Op(":=").Qual(fw, "PathSegment").Call(val)
			g.If(Op("!").Id("ok")).Block(Return(Lit(""), c.fieldError(fd, c.member(fd), "does not address one path segment (empty, . or ..)")))
			parts = append(parts, Id(seg))
			rest = rest[loc[1]:]
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

func (c *codec) hasCode() bool {
	for _, fd := range c.fields {
		if fd.Kind == fixedwidth.Code {
			return true
		}
	}
	return false
}
