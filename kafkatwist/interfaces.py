"""
The seams of kafkatwist.

Reading order follows a request: the network layer (L{IProcessor}) turns a
frame into a L{IRequestContext} and a decoded request, a L{IRequestHandler}
answers it using the broker's services (L{IBroker}): the log
(L{ILogManager}, L{IPartitionLog}), the group coordinator and the delayed
operation purgatory.  Handlers never see a socket or a reactor; whatever waits
does so on a clock it was given.
"""

from zope.interface import Attribute, Interface


class IRequestContext(Interface):
    """
    What the broker knows about one request besides its body (Kafka's
    C{RequestContext}).
    """

    connectionId = Attribute("C{str}: unique id of the connection, 'local-remote-index' like Kafka.")
    listenerName = Attribute("C{str}: the listener the connection came in on, e.g. 'PLAINTEXT'.")
    securityProtocol = Attribute("C{str}: 'PLAINTEXT', 'SSL', 'SASL_PLAINTEXT' or 'SASL_SSL'.")
    principal = Attribute(
        "C{str}: 'User:<name>' after SASL authentication, 'User:<subject DN>' from a client "
        "certificate on SSL (RFC 2253 as Kafka writes it, after ssl.principal.mapping.rules), else "
        "'User:ANONYMOUS'."
    )
    sasl = Attribute(
        "The connection's L{kafkatwist.security.session.SaslSession} on a SASL listener, else "
        "C{None} (the SASL handlers drive it)."
    )
    clientAddress = Attribute("C{tuple[str, int]}: the peer's host and port.")
    apiKey = Attribute("C{int}")
    apiVersion = Attribute("C{int}")
    correlationId = Attribute("C{int}")
    clientId = Attribute("C{str | None}")
    clock = Attribute(
        "L{IThreadSafeClock} of the reactor that owns the connection: timers for this request "
        "(long-poll expiry) are armed on it, from any thread."
    )
    size = Attribute(
        "C{int}: the request's size on the wire, its size prefix included (byte-rate quotas)."
    )
    throttleMs = Attribute(
        "C{int}: how long the connection is throttled once the response is sent (client "
        "quotas).  A handler may raise it (L{kafkatwist.quota.manager.addThrottle}); the "
        "connection's Processor alone acts on it, once the response is on its way."
    )

    def authorize(operation, resourceType, resourceName):
        """
        Ask the broker's authorizer whether this request's principal may do
        C{operation} on a resource (a denial is audit-logged).  A handler
        plugin for its own ApiKey checks its own resources with this, and
        answers with the resource type's error code
        (L{kafkatwist.security.checks.authorizationError}).

        @param operation: a L{kafkatwist.security.acl.AclOperation}.
        @param resourceType: a L{kafkatwist.security.acl.ResourceType}.
        @param resourceName: the resource's name (C{kafka-cluster} for the
            cluster).
        @return: C{bool}; always C{True} without an authorizer.
        """

    def respondLater():
        """
        Claim this request's answer for later (a parked JoinGroup, a long-poll
        Fetch, anything a coordinator answers from its own thread).

        C{handle()} returns the pending response's C{deferred}; callbacks may
        be added to it inside C{handle()} (on the handler thread, e.g. by a
        wrapping plugin).  Nothing fires it there: C{complete()} only hands
        the result to the Processor that owns the connection, which fires the
        Deferred on its own thread once C{handle()} has returned.  So the
        Deferred is touched by one thread at a time -- the handler thread
        until it is returned, the connection's Processor after -- and never
        by the thread that completes it.

        @return: an L{IPendingResponse}.
        """


class IPendingResponse(Interface):
    """
    The answer to one request, to be given later from any thread.
    """

    deferred = Attribute(
        "C{Deferred} to return from C{handle()}; it fires on the connection's Processor thread "
        "with what C{complete} was given."
    )

    def complete(result):
        """
        Answer: C{result} is what C{handle()} could have returned (an entity,
        an C{EncodedResponse}, C{None}) or a C{Failure} (the connection is
        closed with a log line).  Callable from any thread, once; later calls
        are ignored and logged.
        """


class IThreadSafeClock(Interface):
    """
    A clock that may be used from any thread.  Calls are forwarded to the
    owning reactor's thread (or run directly under a test's C{task.Clock}).
    """

    def seconds():
        """
        @return: the current time, in seconds, as the underlying clock sees it.
        """

    def callLater(delay, f, *args, **kw):
        """
        Run C{f(*args, **kw)} in the owning reactor's thread after C{delay}
        seconds.

        @return: a handle with C{cancel()}, safe to call from any thread and
            harmless after the call ran.
        """


class CloseConnection(Exception):
    """
    Raised by a handler (from C{handle} or C{answerFrame}, or a pending
    response completed with it) to close the request's connection without
    an answer, as Kafka's C{requestChannel.closeConnection}: e.g. a Produce
    with acks=0 that failed, so the producer notices.  The connection's
    closing line (info) gives C{str(exception)} as the reason.
    """


def _definedBy(cls: type, name: str):
    # The class in cls's MRO whose own namespace holds name, or None.
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass
    return None


def frameAnswerer(handler):
    """
    The handler's C{answerFrame(context, frame, offset)} if the pool may
    call it instead of the handler's C{handle}, else C{None}.

    Only when the class that defines C{answerFrame} is the one that
    defines the C{handle} the handler would run, both found on the class
    (not through C{__getattr__}, not set on the instance): a subclass that
    overrides C{handle}, or a wrapper that forwards what it lacks to the
    handler it wraps, sees every request unless it defines its own
    C{answerFrame} beside its C{handle}.
    """
    cls = type(handler)
    owner = _definedBy(cls, "answerFrame")
    if owner is None or owner is not _definedBy(cls, "handle"):
        return None
    own = getattr(handler, "__dict__", None)
    if own and ("answerFrame" in own or "handle" in own):
        return None
    return getattr(handler, "answerFrame", None)


class IRequestHandler(Interface):
    """
    Answers one ApiKey.  Built-in and drop-in handlers are discovered as
    L{IRequestHandlerPlugin} providers; each plugin builds one of these.

    C{handle} runs in a handler thread (several may run at once).  It returns
    the response entity (a C{kio} dataclass of the request's version), a
    L{kafkatwist.protocol.frames.EncodedResponse} (pre-encoded chunks,
    e.g. file regions for zero-copy Fetch), C{None} when no response is due
    (Produce with acks=0), or the C{deferred} of C{context.respondLater()}
    (L{IRequestContext.respondLater}), answered later from any thread
    without holding a handler thread.
    Errors a client should see go into the response's error codes, as Kafka
    does; an exception (or a failed Deferred) closes the connection with a
    log line, and the broker keeps serving everyone else.

    Optional: a C{decodeRequest(version, frame, offset)} method replaces the
    generic (kio) decoder for this handler's requests -- the built-in
    Produce uses it to hand record sets on as views of the request frame.

    Optional: an C{answerFrame(context, frame, offset)} method is called
    first, on a handler thread, before anything is decoded: it answers
    the commonest shape of a request straight from its frame (the
    response chunks, size prefix included, or C{None} for no response),
    or returns C{NotImplemented} having done nothing, and the request goes
    the general way.  The built-in Produce has one; a handler wrapping
    another does not inherit it, so it sees every request.  It is called
    only when the class defining it also defines the C{handle} that would
    run (L{frameAnswerer}): a subclass overriding C{handle}, or a wrapper
    forwarding attributes with C{__getattr__}, sees every request unless
    it defines its own C{answerFrame} beside its C{handle}.

    Either method may raise L{CloseConnection} to close the connection
    without an answer (Produce acks=0 that failed, as Kafka does).
    """

    apiKey = Attribute("C{int}: the ApiKey served.")
    minVersion = Attribute("C{int}: lowest version served.")
    maxVersion = Attribute("C{int}: highest version served (ApiVersions advertises the range).")

    def handle(context, request):
        """
        Answer C{request}.

        @param context: the L{IRequestContext}.
        @param request: the decoded request entity.
        """


class IRequestHandlerPlugin(Interface):
    """
    What C{twisted.plugin.getPlugins} discovers: a factory for one ApiKey's
    handler.

    Resolution rule: all providers for one ApiKey are sorted by C{priority},
    highest first; the highest one serves the key and is given the next one
    down as C{wrapped} (so a plugin can replace a built-in or wrap it), and so
    on down the chain.  Two providers with the same ApiKey and priority refuse
    to start, naming both.  Built-ins have priority 0.
    """

    name = Attribute("C{str}: a name for logs, e.g. 'builtin.produce'.")
    apiKey = Attribute("C{int}")
    priority = Attribute("C{int}: higher wins; built-ins are 0, drop-ins default to 100.")

    def makeHandler(broker, wrapped):
        """
        Build the handler.

        @param broker: the L{IBroker} whose services it may use.
        @param wrapped: the L{IRequestHandler} of the next provider down for
            this ApiKey, or C{None}.
        @return: an L{IRequestHandler}.
        """


class IBroker(Interface):
    """
    The services a handler may use (L{kafkatwist.server.broker.BrokerServices}):
    built once at start-up, complete, before the first handler is built.
    An attribute documented as possibly C{None} is so by configuration
    (no ZooKeeper, no authorizer, no log cleaner), never because it is not
    built yet.  C{docs/plugins.md} is the guide for drop-in authors.
    """

    config = Attribute(
        "L{kafkatwist.config.BrokerConfig}: the settings the broker started with (see "
        "C{dynamicConfig} for what dynamic updates made of them)."
    )
    dynamicConfig = Attribute(
        "L{kafkatwist.config.dynamic.DynamicBrokerConfig}: the dynamic broker configs "
        "(C{current} is the configuration in force; in a cluster they are ZooKeeper's)."
    )
    nodeId = Attribute("C{int}: C{node.id}.")
    clusterId = Attribute("C{str}")
    advertisedListeners = Attribute(
        "C{list} of L{kafkatwist.config.Listener} this broker advertises (name, host, port)."
    )
    logManager = Attribute(
        "L{ILogManager}: every partition's log on this broker."
    )
    replicaManager = Attribute(
        "L{kafkatwist.replication.manager.ReplicaManager} (an L{IReplicaManager}): this "
        "broker's replicas; also where appends that must reach the ISR go "
        "(C{appendRecords}).  A single broker's is idle: every log leads alone."
    )
    fetchPurgatory = Attribute("L{IPurgatory} for long-poll Fetch (keys: (topic, partition)).")
    producePurgatory = Attribute(
        "L{IPurgatory} of what waits for replicas (acks=all produces, coordinator appends, "
        "DeleteRecords; keys: (topic, partition))."
    )
    fetchSessions = Attribute(
        "L{kafkatwist.plugins.fetchsessions.FetchSessions}: incremental fetch sessions and their owner."
    )
    groupCoordinator = Attribute(
        "The group coordinator (L{kafkatwist.coordinator.service.GroupCoordinatorService})."
    )
    transactionCoordinator = Attribute(
        "The transaction coordinator "
        "(L{kafkatwist.coordinator.transaction.service.TransactionCoordinatorService})."
    )
    cluster = Attribute(
        "With C{zookeeper.connect}: the L{kafkatwist.cluster.service.ClusterService} (its "
        "C{image}, a L{kafkatwist.cluster.image.ClusterImage}, is what Metadata and the admin "
        "APIs answer from); C{None} for a broker that is a cluster of one."
    )
    clock = Attribute("L{IThreadSafeClock} for broker-wide timers (not tied to a connection).")
    authorizer = Attribute("The L{IAuthorizer}, or C{None} when none is configured (everything allowed).")
    scramCredentials = Attribute(
        "The L{kafkatwist.security.credentials.CredentialStore}: SCRAM credentials by user and "
        "mechanism, which SASL/PLAIN checks too."
    )
    clientQuotas = Attribute(
        "L{kafkatwist.quota.manager.ClientQuotas}: client byte-rate and request quotas "
        "(AlterClientQuotas), read from the data directory."
    )
    replicationQuotas = Attribute(
        "L{kafkatwist.replication.quota.ReplicationQuotas}: the leader and follower "
        "replication throttles."
    )
    topicBytes = Attribute(
        "L{kafkatwist.metrics.stats.TopicBytes}: bytes and messages in and out per topic (metrics)."
    )
    requestErrors = Attribute(
        "L{kafkatwist.metrics.stats.RequestErrors}: errors per API and error code (metrics)."
    )
    logCleaner = Attribute(
        "The L{kafkatwist.log.cleaner.LogCleaner}, or C{None} with C{log.cleaner.enable=false}; "
        "a dynamic update may replace it."
    )

    def handlerFor(apiKey):
        """
        @return: the L{IRequestHandler} serving C{apiKey}, or C{None}.
        """

    def callInHandlerThread(f, *args):
        """
        Run C{f(*args)} on a request handler thread, where disk I/O is
        allowed: how a reactor thread (a timer) hands storage work on.
        Safe from any thread; runs at once before the server started.
        """

    def afterResponse(f, *args):
        """
        On a handler thread: run C{f(*args)} once the current request's
        response is on its way (work the answer need not wait for, e.g.
        waking the fetches a produce satisfied).  Elsewhere: at once.
        """

    def wakePartition(key):
        """
        Re-check what waits on partition C{key}, C{(topic, partition)}:
        acks=all produces and long-poll fetches (its high watermark or its
        leadership changed).  Any thread.
        """

    def advertisedListenerFor(listenerName):
        """
        @return: the L{kafkatwist.config.Listener} advertised for the
            listener a request came in on (the first one if none by that
            name), as Kafka answers Metadata per listener.
        """

    def supportedVersions():
        """
        @return: C{dict} ApiKey -> (minVersion, maxVersion) of the registered
            handlers (what ApiVersions answers).
        """


class IAuthorizer(Interface):
    """
    Decides who may do what (Kafka's C{org.apache.kafka.server.authorizer.Authorizer}).
    Chosen with C{authorizer.class.name}; without one, everything is allowed.

    Called from handler threads, several at once, on every request that
    touches a resource: C{authorize} must be cheap and must not block.
    Resources, operations and ACLs are those of L{kafkatwist.security.acl}.
    """

    def authorize(context, actions):
        """
        @param context: the L{IRequestContext} (C{principal},
            C{clientAddress}, C{apiKey}...).
        @param actions: C{list} of L{kafkatwist.security.acl.Action}
            (operation, resource type, LITERAL resource name, and whether an
            answer is worth an audit log line).
        @return: C{list} of C{bool}, allowed or not, one per action.
        """

    def authorizeByResourceType(context, operation, resourceType):
        """
        Whether C{context}'s principal may do C{operation} on at least one
        resource of C{resourceType} (InitProducerId without a transactional
        id asks for WRITE on any topic).

        @return: C{bool}.
        """

    def acls(aclFilter):
        """
        @param aclFilter: an L{kafkatwist.security.acl.AclBindingFilter}.
        @return: the L{kafkatwist.security.acl.AclBinding}s it matches
            (DescribeAcls).
        """

    def createAcls(context, bindings):
        """
        Add ACLs, durably (CreateAcls).

        @return: per binding, C{None} or the L{kafkatwist.errors.KafkaError}
            that refused it.
        """

    def deleteAcls(context, filters):
        """
        Remove every ACL each filter matches, durably (DeleteAcls).

        @return: per filter, (C{None} or a L{kafkatwist.errors.KafkaError},
            C{list} of the L{kafkatwist.security.acl.AclBinding}s removed).
        """

    def close():
        """
        Release what the authorizer holds (broker shutdown).
        """


class IAuthorizerPlugin(Interface):
    """
    What C{twisted.plugin.getPlugins} discovers (in C{kafkatwist.plugins},
    installed C{twisted/plugins/}, and C{plugin.paths}): a factory for an
    L{IAuthorizer}, selected when C{authorizer.class.name} equals its name.
    """

    name = Attribute(
        "C{str}: the C{authorizer.class.name} value that selects it; the built-in one is "
        "Kafka's 'org.apache.kafka.metadata.authorizer.StandardAuthorizer'."
    )

    def makeAuthorizer(broker):
        """
        @param broker: the L{IBroker} (C{config} holds every setting,
            including the plugin's own).
        @return: an L{IAuthorizer}.
        @raise kafkatwist.config.ConfigError: a setting it cannot use.
        """


class IDelayedOperation(Interface):
    """
    Kafka's C{DelayedOperation}: something that completes when a condition
    holds or when its timeout passes, whichever comes first, exactly once.
    """

    def tryComplete():
        """
        Check the condition; if it holds, call C{forceComplete()}.

        @return: C{True} if this call completed the operation.
        """

    def forceComplete():
        """
        Complete now (condition met or expired).  Only the first call has an
        effect; later ones return C{False}.
        """

    def onExpiration():
        """
        Called once, after C{forceComplete} because the timeout passed.
        """


class IPurgatory(Interface):
    """
    Kafka's C{DelayedOperationPurgatory}: operations watched by keys, checked
    again when something happens to a key.  Thread-safe.
    """

    def tryCompleteElseWatch(operation, keys, timeout):
        """
        Try once; if not complete, watch C{keys} and expire after C{timeout}
        seconds on the operation's clock.

        @return: C{True} if completed at once.
        """

    def checkAndComplete(key):
        """
        Try every operation watching C{key}.

        @return: how many completed.
        """


# ---------------------------------------------------------------------------
# Storage


class IFileRegion(Interface):
    """
    A byte range of an open file, handed to the network layer so PLAINTEXT
    connections can C{os.sendfile} it and TLS ones C{os.pread} it.  The region
    owns its descriptor (a dup) and must be closed once sent or dropped.
    """

    length = Attribute("C{int}: bytes in the region.")

    def fileno():
        """
        @return: the descriptor to read from.
        """

    def position():
        """
        @return: the offset in the file where the region starts.
        """

    def read():
        """
        @return: the region's bytes (for TLS, tests, and plugins that inspect
            records).
        """

    def close():
        """
        Release the descriptor.  Idempotent.
        """


class IPartitionLog(Interface):
    """
    One topic-partition's log.  Thread-safe: appends are serialised, reads
    may run concurrently with an append and see a prefix of it, never a torn
    batch.
    """

    topic = Attribute("C{str}")
    partition = Attribute("C{int}")
    config = Attribute(
        "L{kafkatwist.log.config.LogConfig}: the topic's resolved settings "
        "(C{minInsyncReplicas}, C{maxMessageBytes}...)."
    )
    logStartOffset = Attribute("C{int}: first offset still readable.")
    logEndOffset = Attribute("C{int}: next offset to be assigned.")
    highWatermark = Attribute(
        "C{int}: the offset below which every replica in the ISR has the records -- what "
        "consumers may read up to.  It is C{logEndOffset} while the leader is alone in its "
        "ISR (and on a single broker); the replica manager holds it back while followers "
        "catch up; never past C{logEndOffset}."
    )
    lastStableOffset = Attribute(
        "C{int}: the first offset of the oldest open transaction, else C{highWatermark}."
    )
    size = Attribute("C{int}: bytes on disk over all segments.")
    isLeader = Attribute(
        "C{bool}: whether this replica takes appends (the replica manager clears it on a "
        "follower; a single broker leads every partition)."
    )
    leaderEpoch = Attribute("C{int}: the leader epoch this replica is in.")
    inSyncReplicas = Attribute(
        "C{frozenset} of the ISR's broker ids as the replica manager last published them "
        "(empty on a follower), or C{None} for a partition that is not replicated (a single "
        "broker; C{min.insync.replicas} is then not checked)."
    )
    producerState = Attribute(
        "L{kafkatwist.log.producerstate.ProducerStateManager}: idempotent and transactional "
        "producers' state in this partition (e.g. C{hasOngoingTxn(producerId)})."
    )

    def replicated():
        """
        Whether the high watermark is held back for followers (a leader with
        followers in its ISR, or a follower): then appended records are not
        readable, nor acknowledged to acks=all, until the ISR has them.
        C{False} where it follows the log end.  The one way to ask it.
        """

    def append(records, nowMs):
        """
        Validate and append one produce request's record set for this
        partition: a concatenation of magic-2 record batches, kept opaque
        (header, CRC-32C and record count checked; base offset rewritten;
        max timestamp rewritten for LogAppendTime topics).

        @param records: C{bytes}/C{memoryview}.
        @param nowMs: the broker's wall clock, for LogAppendTime and the
            time index.
        @return: L{kafkatwist.log.AppendInfo} (firstOffset, lastOffset,
            logAppendTime or -1, logStartOffset).
        @raise kafkatwist.errors.KafkaError: CORRUPT_MESSAGE,
            INVALID_RECORD, MESSAGE_TOO_LARGE, UNSUPPORTED_FOR_MESSAGE_FORMAT...
        """

    def read(offset, maxBytes, minOneBatch=True, readCommitted=False, toLogEnd=False, inline=0):
        """
        Read from C{offset}: whole batches starting with the one containing
        C{offset}, at most C{maxBytes} unless C{minOneBatch} and the first
        batch alone is larger; with C{readCommitted}, only below the last
        stable offset.  Callers pass all six positionally (the Fetch
        handler does).

        @param toLogEnd: read up to the log end offset (a follower's fetch)
            rather than the high watermark (a consumer's).
        @param inline: records of at most this many bytes may come as
            C{bytes} rather than a file region (C{0}: always a region, or
            C{bytes} where the log keeps them in memory).

        @return: L{kafkatwist.log.ReadInfo} (records: an L{IFileRegion} or
            C{bytes}, possibly empty; highWatermark, logStartOffset,
            lastStableOffset; with C{readCommitted} the aborted
            transactions the records overlap).
        @raise kafkatwist.errors.KafkaError: OFFSET_OUT_OF_RANGE.
        """

    def offsetForTimestamp(timestamp_ms):
        """
        @return: C{(offset, timestamp)} of the first batch whose max
            timestamp is at or after C{timestamp_ms}, or C{None}.
        """

    def maxTimestamp():
        """
        @return: C{(offset, timestamp)} of the record with the largest
            timestamp, or C{None} for an empty log.
        """

    def deleteRecordsBefore(offset):
        """
        Move the log start offset to C{offset} (DeleteRecords).

        @return: the new log start offset.
        @raise kafkatwist.errors.KafkaError: OFFSET_OUT_OF_RANGE past the end.
        """


class ILogManager(Interface):
    """
    All topics' logs under C{log.dirs}.  Thread-safe.
    """

    def topics():
        """
        @return: C{dict} topic name -> L{kafkatwist.log.TopicInfo}
            (partitions count, topic id, configs).
        """

    def topicName(topicId):
        """
        The name of the topic whose id is C{topicId} (a C{uuid.UUID}), or
        C{None} if no topic has it: what Fetch v13+ asks for every topic of
        every request, without a copy of the topic table.
        """

    logDirs = Attribute("C{list} of the absolute data directories (empty for a log in memory).")

    def directoryOf(topic, partition):
        """
        The directory of C{logDirs} holding a partition's log, or C{None}.
        """

    def getLog(topic, partition):
        """
        @return: the L{IPartitionLog}, or C{None} if absent.
        """

    def createTopic(name, numPartitions, configs):
        """
        @raise kafkatwist.errors.KafkaError: TOPIC_ALREADY_EXISTS,
            INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS, INVALID_CONFIG.
        @return: L{kafkatwist.log.TopicInfo}.
        """

    def deleteTopic(name):
        """
        @raise kafkatwist.errors.KafkaError: UNKNOWN_TOPIC_OR_PARTITION.
        """

    def createPartitions(name, totalCount):
        """
        @raise kafkatwist.errors.KafkaError: INVALID_PARTITIONS, UNKNOWN_TOPIC_OR_PARTITION.
        """

    def alterTopicConfigs(name, changes):
        """
        Apply C{changes}: C{list} of (key, op, value) with op 'SET',
        'DELETE', 'APPEND', 'SUBTRACT' (IncrementalAlterConfigs).
        """

    def adoptTopicId(name, topicId):
        """
        Give topic C{name} the id C{topicId}, its data kept (an internal
        topic this broker created with an id of its own takes the id the
        cluster's controller gave it).
        @return: L{kafkatwist.log.TopicInfo}.
        """

    def setBrokerDefaults(defaults):
        """
        New broker-level settings (C{log.*} and the other keys topics
        inherit, key -> value) after a dynamic broker config update: every
        topic resolves its config again.
        """

    def close():
        """
        Flush, write checkpoints and the clean-shutdown marker, release files.
        """


class ICoordinatorLog(Interface):
    """
    A coordinator's internal topic (C{__consumer_offsets} for groups): where
    its state machine's C{Append} effects are written and where its state is
    read back from at start-up.  Blocking: call it on handler or coordinator
    threads, never on a reactor thread.  Appends to one partition must be
    made one at a time, in order (the coordinator's runtime does so).
    """

    topic = Attribute("C{str}: the topic's name.")
    numPartitions = Attribute("C{int}: its partition count.")

    def append(partition, records):
        """
        Append C{records}, C{(key, value)} pairs (a C{None} value is a
        tombstone), as one batch.

        @raise kafkatwist.errors.KafkaError: the log refused it.
        @raise OSError: the disk did.
        """

    def replay(partition):
        """
        @return: an iterator of C{(offset, key, value)}: the partition's
            records from its start, in offset order.  What cannot be read is
            skipped with one log line naming topic, partition and offsets;
            this never raises for damaged data.
        """


class ITxnMarkerChannel(Interface):
    """
    How the transaction coordinator's end-transaction markers reach the
    partitions of a transaction: in process on one broker, WriteTxnMarkers
    to each partition's leader in a cluster
    (L{kafkatwist.coordinator.transaction.channel}).
    """

    def write(producerId, producerEpoch, commit, coordinatorEpoch, partitions, onDone):
        """
        Write the marker (COMMIT if C{commit}, else ABORT) of producer
        C{producerId} at C{producerEpoch} into C{partitions}, C{(topic,
        partition)} pairs, with C{coordinatorEpoch}.  Any thread but a
        reactor's (one broker's channel appends before it returns).  One
        attempt: C{onDone(results)} is called once, on any thread, with
        C{{(topic, partition): ErrorCode}}, or C{None} for a partition that
        no longer exists (no marker is needed there).
        """

    def stop():
        """
        Stop; markers under way are not answered.
        """


# ---------------------------------------------------------------------------
# Cluster (issue 17): the seam between the control plane (kafkatwist.cluster)
# and the replicas (kafkatwist.replication).  IReplicaManager is the
# replication side's.


class IAlterIsr(Interface):
    """
    How a leader changes its ISR: a conditional write of the partition's
    state znode on C{partitionEpoch} (its ZooKeeper version), as
    ZooKeeper-mode Kafka's leader does, then a notification under
    C{/isr_change_notification}.
    """

    def alterIsr(topic, partition, leaderId, leaderEpoch, newIsr, partitionEpoch, onDone,
                 brokerEpochs=None):
        """
        @param onDone: called once, on any thread, as C{onDone(newPartitionEpoch,
            None)} or C{onDone(None, KafkaError)}; after a failed conditional
            write the leader waits for its next C{becomeLeader}.
        @param brokerEpochs: C{{broker id: broker epoch}} of the replicas
            added, the registration their fetches were made under (Kafka's
            NewIsrWithEpochs, KIP-903; -1: not known).  One that is not
            the replica's current registration is refused with
            INELIGIBLE_REPLICA.
        """


class IBrokerDirectory(Interface):
    """
    Live brokers as the cluster knows them.
    """

    def endpoint(brokerId, listenerName=None):
        """
        @return: C{(host, port)} of the broker's listener (the first one
            without C{listenerName}), or C{None} if it is not alive.
        """

    def aliveBrokers():
        """
        @return: C{frozenset} of live broker ids.
        """

    def rack(brokerId):
        """
        @return: the live broker's C{broker.rack}, or C{None}.
        """


class IReplicaManager(Interface):
    """
    The broker's replicas (kafkatwist.replication), as the cluster layer
    tells them their roles.  Every method returns at once; the work
    (which touches disk: epoch checkpoints, truncation) runs on the replica
    manager's own thread.
    """

    def becomeLeader(topic, partition, leaderEpoch, isr, replicas, partitionEpoch):
        """
        Lead the partition in C{leaderEpoch} with this ISR.

        @param partitionEpoch: the version of the partition's state znode
            that carried this state (what L{IAlterIsr.alterIsr} is
            conditional on).  An older C{leaderEpoch} than the one applied
            is ignored.
        """

    def becomeFollower(topic, partition, leaderId, leaderEpoch, replicas, partitionEpoch):
        """
        Follow C{leaderId} in C{leaderEpoch}: truncate to the divergence
        point (OffsetForLeaderEpoch) and fetch from it.  An older
        C{leaderEpoch} than the one applied is ignored.
        """

    def stopReplica(topic, partition, delete):
        """
        Stop leading or following the partition (the log itself is the
        log manager's to delete).
        """

    def leaderEpochs():
        """
        @return: C{{(topic, partition): (role, leaderEpoch)}}, a snapshot,
            role C{"leader"} or C{"follower"}.
        """
