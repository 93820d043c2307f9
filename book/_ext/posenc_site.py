"""Sphinx glue for the posenc site: one fix to the pages' <script> list.

Sphinx 7.4 records an inline script added before the build starts with filename '' and the same
script added again for the builder with filename None, so they compare unequal and both reach the
page. For sphinx-togglebutton that is harmless, but sphinx-thebe's inline script declares
``const THEBE_JS_URL``, and the second copy is a JavaScript SyntaxError on every page (caught by
tests/test_site.py). This keeps the first of equal scripts.
"""


def drop_duplicate_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        filename = getattr(script, "filename", script) or ""
        attributes = tuple(sorted(getattr(script, "attributes", {}).items()))
        key = (filename, attributes)
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


def setup(app):
    app.connect("html-page-context", drop_duplicate_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
