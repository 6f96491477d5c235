from twisted.application.service import ServiceMaker

kafkatwist = ServiceMaker(
    "kafkatwist", "kafkatwist.tap", "A broker that speaks the Apache Kafka protocol.", "kafkatwist"
)
