"""
The built-in request handlers, one module per API or API family.  Each
module holds C{HandlerPlugin} objects that C{twisted.plugin.getPlugins}
discovers, exactly as it discovers drop-ins on C{plugin.paths}.
"""
